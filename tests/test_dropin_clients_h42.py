

def _two_external_weights(folder: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """The decoder step with its table and a second weight (a Gather's) both in ``w.bin``."""
    model = _decoder_step()
    table = np.random.default_rng(1).standard_normal((512, 4)).astype(np.float32)
    scale = np.random.default_rng(2).standard_normal((300,)).astype(np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(table, "table"))
    model.graph.initializer.append(numpy_helper.from_array(scale, "scale"))
    model.graph.initializer.append(numpy_helper.from_array(np.array([0, 299, -1], np.int64), "scale_at"))
    model.graph.node.append(helper.make_node("Gather", ["scale", "scale_at"], ["scaled"], axis=0, name="g2"))
    model.graph.output.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [3]))
    folder.mkdir(parents=True)
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="w.bin", size_threshold=1024)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx", table, scale


@pytest.mark.parametrize("whole", [True, False], ids=["whole file", "file too short"])
def test_external_data_files_in_memory_as_onnxruntime_reads_them(whole: bool, tmp_path: Path) -> None:
    """``add_external_initializers_from_files_in_memory`` with a file holding one of the two tensors the
    model keeps there: onnxruntime refuses the session (Fail); dmlshim read the other from disk and ran."""
    path, table, scale = _two_external_weights(tmp_path / "model")
    content = (-table).tobytes() + ((-scale).tobytes() if whole else b"")
    kept = []

    def options() -> onnxruntime.SessionOptions:
        so = _options()
        data = bytes(content)
        kept.append(data)
        so.add_external_initializers_from_files_in_memory(["w.bin"], [data], [len(data)])
        return so

    feeds = _feeds()
    if not whole:
        expected = _raised(
            lambda: onnxruntime.InferenceSession(path, options(), providers=["CPUExecutionProvider"])
        )
        got = _raised(lambda: dmlshim.InferenceSession(path, options()))
        assert isinstance(got, type(expected)), (type(got).__mro__, type(expected))
        return
    want = onnxruntime.InferenceSession(path, options(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got_out = dmlshim.InferenceSession(path, options()).run(None, feeds)
    np.testing.assert_array_equal(want[2], -scale[[0, 299, -1]])  # read from memory, not from w.bin
    for g, e in zip(got_out, want, strict=True):
        np.testing.assert_array_equal(g, e)
