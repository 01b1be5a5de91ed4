"""Trace collectors (`gmmv collect resources|subtasks|downloads`).

They measure, on the machine they run on, what the fitting code needs (paper section
2.2): resources available for volunteering (allocations), execution-stage consumption
of real CV inference subtasks, and subtask-data download consumption at Lloyd-Max
quantized bandwidth levels. Formats: `traces/FORMAT.md`.

`resources` and `lloyd_max` need only the standard library and numpy; `subtasks` and
`downloads` need the `collect` extra (onnxruntime, rapidocr, and onnx, which writes the
default catalogue's random-weight graphs); the paper-scale architectures are built with
torch (the `paper-models` extra).
"""
