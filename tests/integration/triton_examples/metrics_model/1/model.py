"""Counts its requests, keeps the last input as a gauge and observes inputs in a histogram,
through pb_utils.MetricFamily, labelled with its name and version as Triton's example does."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests_family = pb_utils.MetricFamily(
            name="ferry_test_requests", description="requests this model saw", kind=pb_utils.MetricFamily.COUNTER
        )
        self.last_family = pb_utils.MetricFamily(
            name="ferry_test_last_input", description="the last input", kind=pb_utils.MetricFamily.GAUGE
        )
        self.sizes_family = pb_utils.MetricFamily(
            name="ferry_test_inputs", description="inputs seen", kind=pb_utils.MetricFamily.HISTOGRAM
        )
        self.requests = self.requests_family.Metric(labels=labels)
        self.last = self.last_family.Metric(labels=labels)
        self.sizes = self.sizes_family.Metric(labels=labels, buckets=[1.0, 2.5, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.requests.increment(1)
            self.last.set(float(x[0]))
            self.sizes.observe(float(x[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
