"""bls_sum with async execute and async_exec(decoupled=True)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="square",
                inputs=[pb_utils.Tensor("IN", pb_utils.get_input_tensor_by_name(request, "N").as_numpy())],
                requested_output_names=["OUT"],
            )
            answers = await call.async_exec(decoupled=True)
            values = [
                int(pb_utils.get_output_tensor_by_name(a, "OUT").as_numpy()[0]) for a in answers if a.output_tensors()
            ]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("TOTAL", np.array([sum(values)], dtype=np.int32)),
                        pb_utils.Tensor("RESPONSES", np.array([len(values)], dtype=np.int32)),
                    ]
                )
            )
        return responses
