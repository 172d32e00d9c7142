"""Started by Python in every process of a program run with ``python -m dmlshim.ort`` (this folder is put
first on ``PYTHONPATH``): binds dmlshim in place of onnxruntime in worker processes too (multiprocessing's
spawn and forkserver start fresh interpreters), then runs the ``sitecustomize`` this one hides, if any."""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("DMLSHIM_ORT_INSTALL") == "1":
    try:
        from dmlshim.ort.install import install_from_environment

        install_from_environment()
    except Exception as exc:  # never stop the program from starting
        sys.stderr.write(
            f"dmlshim: could not bind dmlshim in place of onnxruntime in process {os.getpid()}: {exc}\n"
        )


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_chain()
