"""Build helpers for setup.py: one module per native dependency (ALE, MuJoCo).

Each module exposes ``ext_args(build_temp: str) -> dict`` with any of the keys
``sources``, ``include_dirs``, ``library_dirs``, ``libraries``,
``extra_compile_args``, ``extra_link_args``, ``define_macros``; setup.py merges
them into the ``torchfrag._C`` extension.
"""
