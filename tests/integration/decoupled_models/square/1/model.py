"""For input N, N responses of N (none for 0), sent from execute; the last one carries the final flag."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("square must be decoupled")

    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            count = int(value[0])
            sender = request.get_response_sender()
            for index in range(count):
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index == count - 1 else 0
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]), flags=flags)
            if count == 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
