"""Answers every request once and never ends it (no final flag): its requests stay open."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.get_response_sender().send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return None
