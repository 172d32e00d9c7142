"""Real DirectML on Linux: DirectML.dll and onnxruntime's DirectML provider under Wine, D3D12 from vkd3d (with
DXIL) on Mesa's lavapipe, set up from the package registries (``dmlshim directml setup``).

- :mod:`.wine`: the stack folder, reading ``stack.json``, Wine's environment and the process's one Xvfb
  (shared with the DxDispatch replay host).
- :mod:`.stack`: ``stack.json`` as the engine reads it.
- :mod:`.setup`, :mod:`.wine_build`: setting the stack up.
- :mod:`.host`: the Windows ``node.exe`` process running onnxruntime-node's DirectML provider.
- :mod:`.verify`: the stack's one-node self-check.
- :mod:`.engine`: the ``directml`` engine (onnxruntime's DmlExecutionProvider in this process on Windows,
  or :mod:`.wine_engine` through the host on Linux); :mod:`.records` its run record's nodes.
"""
