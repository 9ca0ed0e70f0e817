"""Business logic: forwards its inputs to the model named in TARGET (the ONNX "simple" model) with
InferenceRequest.exec() and returns that model's answer, or its error."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0, 0].decode()
            call = pb_utils.InferenceRequest(
                model_name=target,
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()),
                        pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()),
                    ]
                )
            )
        return responses
