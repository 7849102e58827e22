"""RWKV-7 on any GPU from Python: RWKV Studio's engine (wgpu), numpy in and out.

>>> import rwkv_studio
>>> model = rwkv_studio.Model("assets/models/rwkv7-demo-6x256-Q4_K_M.gguf")
>>> model.generate("It was a dark and stormy night, and the ship", 32, temperature=0)

See ``docs/python.md`` and the typed, documented stubs in ``__init__.pyi``.
"""

from ._native import FieldAnalysis, Model, State, TextStream, __commit__, __version__, adapters

__all__ = ["Model", "State", "TextStream", "FieldAnalysis", "adapters", "__version__", "__commit__"]
