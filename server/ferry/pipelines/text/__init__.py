"""Text (OCR) stages, reproducing PaddleOCR's conventions as rapidocr_onnxruntime 1.4.4 runs them.

- ``sizes``: the size rules of variable-size inputs (limit a side, round to a multiple of 32) and
  of text lines (fixed height, aspect kept, right padding up to a width);
- ``tensors``: images (BGR uint8, as the reference feeds them) to the models' input tensors;
- ``db``: DBNet probability map to text quadrilaterals (binarise, contours, rotated boxes, unclip);
- ``ctc``: CTC greedy decoding over a character dictionary;
- ``reading``: reading order, perspective crops of quadrilaterals, angle fix-up, recognition
  batches and the mapping back to the caller's pixels.
"""
