"""OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 on INT32 [16], like model_repo/simple."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a, b = (pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in ("INPUT0", "INPUT1"))
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)])
            )
        return responses
