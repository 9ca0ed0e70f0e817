"""A stand-in for an LLM behind Triton's generate extension, written after the situation of
Triton's test model ``mock_llm`` (its config's facts: PROMPT and STREAM of dims [1, 1], TEXT out,
``KIND_MODEL``; no code copied). It echoes PROMPT as TEXT and is steered by request parameters:
REPETITION responses when STREAM is true (one otherwise), FAIL_LAST ends with an error response,
OUTPUT_0_DIM sends an empty TEXT, and ECHO_PARAMETERS sends the parameters it saw, as JSON, in
TEXT. Decoupled or not, as its config says (the test makes a copy that is not)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)

    def execute(self, requests):
        answers = [self.answer(request) for request in requests]
        return None if self.decoupled else [responses[0] for responses in answers]

    def answer(self, request):
        params = json.loads(request.parameters())
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
        stream = bool(pb_utils.get_input_tensor_by_name(request, "STREAM").as_numpy().flatten()[0])
        if params.get("ECHO_PARAMETERS"):
            text = np.array([[json.dumps(params, sort_keys=True).encode()]], dtype=object)
        elif params.get("OUTPUT_0_DIM"):
            text = np.empty((1, 0), dtype=object)
        else:
            text = prompt
        response = pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)])
        if not self.decoupled:
            return [response]
        sender = request.get_response_sender()
        if not stream:
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return []
        for _ in range(int(params.get("REPETITION", 1))):
            sender.send(response)
        last = pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
        sender.send(last if params.get("FAIL_LAST") else None, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return []
