"""A decoupled model whose execute fails (after one response when IN is 1)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if int(value[0]) == 1:
                request.get_response_sender().send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        raise RuntimeError("broken on purpose")
