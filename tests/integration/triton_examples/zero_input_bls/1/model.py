"""Takes no input: asks the ONNX model "simple" (named as bytes) for 0..15 + 1 and returns it."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for _ in requests:
            call = pb_utils.InferenceRequest(
                model_name=b"simple",
                inputs=[
                    pb_utils.Tensor("INPUT0", np.arange(16, dtype=np.int32).reshape(1, 16)),
                    pb_utils.Tensor("INPUT1", np.ones((1, 16), dtype=np.int32)),
                ],
                requested_output_names=["OUTPUT0"],
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy().reshape(16)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
