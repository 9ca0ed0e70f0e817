"""Encoded images as a BYTES tensor for a model input that takes them as they are (a Python model
or an ensemble that decodes them itself), shaped as that input declares."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ...repository.model import ModelSpec
from ...types import InferenceRequest, TensorSpec


def encoded_images_request(
    model: ModelSpec, spec: TensorSpec, images: list[bytes], parameters: dict[str, Any]
) -> InferenceRequest:
    """A request carrying ``images`` in input ``spec``: one element per image, batch first when the
    model batches (dims ``[1]``), else along the input's one variable dim (dims ``[-1]``)."""
    array = np.empty(len(images), dtype=object)
    array[:] = images
    shape = (len(images), *spec.dims) if model.max_batch_size else (len(images), *spec.dims[1:])
    try:
        tensor = array.reshape(shape)
    except ValueError:
        raise InvalidArgument(
            f"input '{spec.name}' of model '{model.name}' (dims {list(spec.dims)}) cannot hold "
            f"{len(images)} encoded image(s)"
        ) from None
    return InferenceRequest(
        model_name=model.name,
        model_version=str(model.version),
        inputs={spec.name: tensor},
        input_datatypes={spec.name: "BYTES"},
        parameters=dict(parameters),
    )


def image_bytes_request(
    model: ModelSpec, input_name: str, images: list[bytes], parameters: dict[str, Any]
) -> InferenceRequest:
    """A request with ``images`` as a ``[N]`` BYTES tensor in ``input_name``: the image-input
    pre-stage decodes it into the model's tensor (or, when the input itself is BYTES, it is shaped
    as that input declares)."""
    spec = model.inputs[input_name]
    if spec.datatype == "BYTES":
        return encoded_images_request(model, spec, images, parameters)
    array = np.empty(len(images), dtype=object)
    array[:] = images
    return InferenceRequest(
        model_name=model.name,
        model_version=str(model.version),
        inputs={input_name: array},
        input_datatypes={input_name: "BYTES"},
        parameters=dict(parameters),
    )
