"""Calls the decoupled "square" with exec(decoupled=True) and adds up what its responses carry."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="square",
                inputs=[pb_utils.Tensor("IN", pb_utils.get_input_tensor_by_name(request, "N").as_numpy())],
                requested_output_names=["OUT"],
            )
            total, count, error = 0, 0, None
            for answer in call.exec(decoupled=True):
                if answer.has_error():
                    error = answer.error()
                    break
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is not None:
                    total += int(out.as_numpy()[0])
                    count += 1
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("TOTAL", np.array([total], dtype=np.int32)),
                        pb_utils.Tensor("RESPONSES", np.array([count], dtype=np.int32)),
                    ]
                )
            )
        return responses
