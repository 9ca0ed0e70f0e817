"""X = 1 raises, X = 2 answers with an INVALID_ARG error, X = 3 kills its own process, X = 4 returns
a wrong dtype; anything else is echoed as Y, with the process id as PID."""

import os
import signal

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x == 1).any():
                raise ValueError("X = 1 is not allowed")
            if (x == 3).any():
                os.kill(os.getpid(), signal.SIGKILL)
            if (x == 2).any():
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("two", pb_utils.TritonError.INVALID_ARG))
                )
                continue
            y = x.astype(np.float64) + 0.5 if (x == 4).any() else x  # no INT32 can hold 4.5
            pid = np.full(x.shape, os.getpid(), np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y), pb_utils.Tensor("PID", pid)]))
        return responses
