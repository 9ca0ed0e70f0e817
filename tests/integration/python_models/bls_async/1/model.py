"""An async execute: two concurrent async_exec() calls to "simple", then their OUTPUT0s added."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            calls = [
                pb_utils.InferenceRequest(model_name="simple", inputs=inputs, requested_output_names=["OUTPUT0"])
                for _ in range(2)
            ]
            answers = await asyncio.gather(*(call.async_exec() for call in calls))
            failed = next((a for a in answers if a.has_error()), None)
            if failed is not None:
                responses.append(pb_utils.InferenceResponse(error=failed.error()))
                continue
            total = sum(pb_utils.get_output_tensor_by_name(a, "OUTPUT0").as_numpy() for a in answers)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM_TWICE", total)]))
        return responses
