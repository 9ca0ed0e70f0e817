"""Mean red, green and blue of each encoded image. While the file "hold" exists in GATE_DIR, an
execution writes "entered" there and waits for "release" (so a test can keep the instance busy)."""

import io
import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = Path(config["parameters"]["GATE_DIR"]["string_value"])

    def execute(self, requests):
        if (self.gate / "hold").exists():
            (self.gate / "entered").write_text("1")
            deadline = time.monotonic() + 30
            while not (self.gate / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().reshape(-1)
            pixels = [np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) for data in encoded]
            means = [image.mean(axis=(0, 1)) / 255 for image in pixels]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCORES", np.array(means, np.float32))]))
        return responses
