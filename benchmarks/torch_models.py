"""The GPU benchmark's models: a random-weight ResNet-50 in plain torch, saved as TorchScript, and
a repository serving it through the PyTorch backend (tensor and image inputs).

The network has the topology of benchmarks/models.py (ResNet-50 v1.5 bottlenecks, conv biases and a
scaled-down last conv per residual branch instead of BatchNorm) and needs only torch: no torchvision,
no downloads. Its weights are random because only the compute cost matters here.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import models  # benchmarks/ is on sys.path for every benchmark script
import torch
from torch import nn

NUM_CLASSES = models.NUM_CLASSES
IMAGE_SHAPE = models.IMAGE_SHAPE


def _conv(c_in: int, c_out: int, kernel: int, stride: int = 1, gain: float = 1.0) -> nn.Conv2d:
    conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=True)
    nn.init.normal_(conv.weight, std=gain * math.sqrt(2.0 / (c_in * kernel * kernel)))
    nn.init.normal_(conv.bias, std=0.01)
    return conv


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        c_out = width * models.EXPANSION
        self.reduce = _conv(c_in, width, 1)
        self.spatial = _conv(width, width, 3, stride)
        self.expand = _conv(width, c_out, 1, gain=models.BRANCH_OUT_GAIN)
        self.shortcut = (
            _conv(c_in, c_out, 1, stride, gain=math.sqrt(0.5)) if stride != 1 or c_in != c_out else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.reduce(x))
        y = torch.relu(self.spatial(y))
        return torch.relu(self.expand(y) + self.shortcut(x))


class ResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv(3, 64, 7, stride=2)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks: list[nn.Module] = []
        channels = 64
        for stage, (width, count) in enumerate(models.STAGES):
            for block in range(count):
                blocks.append(Bottleneck(channels, width, 2 if stage > 0 and block == 0 else 1))
                channels = width * models.EXPANSION
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, NUM_CLASSES)
        nn.init.normal_(self.fc.weight, std=math.sqrt(1.0 / channels))
        nn.init.zeros_(self.fc.bias)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - the served input's name
        x = self.pool(torch.relu(self.stem(input)))
        x = self.blocks(x)
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3)), 1))


def build_torchscript(path: Path, seed: int = 0) -> Path:
    """Write the scripted ResNet-50 to ``path`` (skipped when it exists)."""
    if path.exists():
        return path
    torch.manual_seed(seed)
    module = torch.jit.script(ResNet50().eval())
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(module, str(path))
    return path


def config(
    name: str, *, kind: str, instances: int, max_batch_size: int, precision: str, graphs: bool, image_pipeline: str = ""
) -> str:
    """A pytorch-backend config for the benchmark's ResNet-50."""
    return f"""# Built by benchmarks/torch_models.py for benchmarks/gpu_torch.py.
name: "{name}"
backend: "pytorch"
max_batch_size: {max_batch_size}
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ {", ".join(map(str, IMAGE_SHAPE))} ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ {NUM_CLASSES} ] }} ]
instance_group [ {{ kind: {kind} count: {instances} }} ]
dynamic_batching {{ }}
parameters {{ key: "ferry_precision" value: {{ string_value: "{precision}" }} }}
optimization {{ cuda {{ graphs: {"true" if graphs else "false"} }} }}
{image_pipeline}"""


def image_pipeline(device: str, decode: str = "CPU") -> str:
    """ImageNet-style pre-processing of JPEGs: shorter side to 256, centre crop 224, mean/std. The
    Pillow engine on both devices, so the CPU and GPU paths do the same work; ``decode``: where the
    JPEGs are decoded (GPU: torchvision's batched nvJPEG, with device GPU only)."""
    device = f"{device} decode: {decode}" if device == "GPU" else device
    return f"""ferry_image {{
  preprocess {{ color_order: RGB layout: NCHW resize: SHORTER_SIDE_CENTER_CROP interpolation: BILINEAR
               resize_engine: PILLOW mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] device: {device} }}
  classification {{ softmax: true top_k: 5 }}
}}
"""


def write_repository(
    repo: Path,
    model_file: Path,
    *,
    kind: str,
    instances: int,
    max_batch_size: int,
    precision: str,
    graphs: bool,
    preprocess_device: str,
    decode: str = "CPU",
) -> Path:
    """``resnet50`` (tensors) and ``resnet50_images`` (JPEGs) sharing one TorchScript file."""
    for name, pipeline in (("resnet50", ""), ("resnet50_images", image_pipeline(preprocess_device, decode))):
        model_dir = repo / name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        target = model_dir / "1" / "model.pt"
        if not target.exists():
            # A hard link (or a copy): the repository refuses symlinks that leave the model's folder.
            try:
                os.link(model_file, target)
            except OSError:
                shutil.copyfile(model_file, target)
        (model_dir / "config.pbtxt").write_text(
            config(
                name,
                kind=kind,
                instances=instances,
                max_batch_size=max_batch_size,
                precision=precision,
                graphs=graphs,
                image_pipeline=pipeline,
            )
        )
    return repo
