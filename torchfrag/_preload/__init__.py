"""Load the shared libraries ``torchfrag._C`` resolves symbols from.

``torchfrag._C`` is linked without hard paths to ALE or MuJoCo: their symbols
are resolved from the libraries that the installed ``ale_py`` and ``mujoco``
wheels ship.  Each module here checks the installed version against the one
the extension was built for and loads the library with ``RTLD_GLOBAL`` before
``torchfrag._C`` is imported.
"""
