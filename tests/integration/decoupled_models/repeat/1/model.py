"""Sends IN back COUNT times, each with its index, from a thread of its own, then the final flag.
At index ERROR_AT it sends an error response instead (the stream goes on). Metrics let a test see
a producer held back by a client that does not read: the responses sent, the senders inside a
``send()`` (one that waits for the reader stays there), and the requests it stopped for
``is_cancelled()``."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        gauge, counter = pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.COUNTER
        self.families = [  # a metric lives as long as its family
            pb_utils.MetricFamily(name="ferry_test_repeat_sent", description="responses sent by repeat", kind=gauge),
            pb_utils.MetricFamily(name="ferry_test_repeat_sending", description="senders inside send()", kind=gauge),
            pb_utils.MetricFamily(
                name="ferry_test_repeat_cancelled", description="requests stopped for is_cancelled()", kind=counter
            ),
        ]
        self.sent, self.sending, self.stopped = (family.Metric(labels=labels) for family in self.families)
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.answer, args=(request,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
        error_at = pb_utils.get_input_tensor_by_name(request, "ERROR_AT")
        error_at = int(error_at.as_numpy()[0]) if error_at is not None else -1
        for index in range(count):
            if request.is_cancelled():
                self.stopped.increment(1)
                break
            if index == error_at:
                response = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"no answer at {index}"))
            else:
                response = pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", data), pb_utils.Tensor("IDX", np.array([index], dtype=np.int32))]
                )
            self.sending.increment(1)
            sender.send(response)
            self.sending.increment(-1)
            self.sent.increment(1)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=5)
