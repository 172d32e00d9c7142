"""scikit-learn models converted by skl2onnx and by hummingbird-ml (tree ensembles as tensor graphs)."""

from __future__ import annotations

import numpy as np
import onnx
from eco_common import Built, Spec
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

SKL = ("scikit-learn", "skl2onnx")


def _data(seed: int, n: int = 60, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    return x, y


def _ir(model: onnx.ModelProto) -> onnx.ModelProto:
    model.ir_version = min(model.ir_version, 10)
    # skl2onnx lists the opsets in set order (it changes with PYTHONHASHSEED): sort them for stable bytes.
    opsets = sorted(model.opset_import, key=lambda o: o.domain)
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    return model


def skl_knn_zipmap() -> Built:
    """kNN classifier: Scan distances, TopK, ArrayFeatureExtractor labels, ZipMap probabilities."""
    from skl2onnx import to_onnx

    x, y = _data(11)
    clf = KNeighborsClassifier(n_neighbors=3).fit(x, y)
    model = to_onnx(clf, x[:1], target_opset={"": 18, "ai.onnx.ml": 3})
    return Built(_ir(model), {"X": x[:5]})


def skl_column_pipeline() -> Built:
    """ColumnTransformer (one-hot of two int columns, scaling of two float columns) then logistic
    regression, ZipMap disabled: skl2onnx selects columns with Gather."""
    from skl2onnx import to_onnx

    rng = np.random.default_rng(12)
    x = np.concatenate([rng.integers(0, 3, (50, 2)), rng.standard_normal((50, 2))], axis=1).astype(np.float32)
    y = (x[:, 2] + x[:, 0] > 1).astype(np.int64)
    pipe = Pipeline([
        ("cols", ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                                    ("num", StandardScaler(), [2, 3])])),
        ("lr", LogisticRegression(random_state=0)),
    ]).fit(x, y)
    model = to_onnx(pipe, x[:1], target_opset={"": 18, "ai.onnx.ml": 3}, options={"zipmap": False})
    return Built(_ir(model), {"X": x[:6]})


def _hb(estimator: object, x: np.ndarray, implementation: str) -> onnx.ModelProto:
    import functools

    import hummingbird.ml
    import torch

    # hummingbird 0.4 passes dynamic_axes to torch.onnx.export, written for the TorchScript exporter;
    # torch 2.9+ defaults to dynamo, which refuses them: ask for the legacy exporter explicitly.
    original = torch.onnx.export
    torch.onnx.export = functools.partial(original, dynamo=False)
    try:
        torch.manual_seed(0)
        container = hummingbird.ml.convert(
            estimator, "onnx", x, extra_config={"tree_implementation": implementation, "onnx_target_opset": 17}
        )
    finally:
        torch.onnx.export = original
    return _ir(container.model)


def hb_gbdt_tree_trav() -> Built:
    """Gradient-boosted trees walked node by node (tree_trav): Gather/GatherElements on the tree tables."""
    x, y = _data(21)
    clf = GradientBoostingClassifier(n_estimators=4, max_depth=3, random_state=0).fit(x, y)
    model = _hb(clf, x[:4], "tree_trav")
    return Built(model, {model.graph.input[0].name: x[:4]})


def hb_forest_perf_tree_trav() -> Built:
    """Random forest regressor as perf_tree_trav (all trees of a depth level gathered at once)."""
    x, y = _data(22)
    reg = RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0).fit(x, y.astype(np.float32))
    model = _hb(reg, x[:4], "perf_tree_trav")
    return Built(model, {model.graph.input[0].name: x[:4]})


def hb_forest_gemm() -> Built:
    """Random forest regressor as GEMM (the tree as matrix products): for contrast, few gathers."""
    x, y = _data(23)
    reg = RandomForestRegressor(n_estimators=3, max_depth=3, random_state=0).fit(x, y.astype(np.float32))
    model = _hb(reg, x[:4], "gemm")
    return Built(model, {model.graph.input[0].name: x[:4]})


HB = ("scikit-learn", "hummingbird-ml", "torch")
SPECS: list[Spec] = [
    Spec("skl_knn_zipmap", "skl2onnx", "KNeighborsClassifier: Scan, TopK, ArrayFeatureExtractor, ZipMap output",
         skl_knn_zipmap, SKL),
    Spec("skl_column_pipeline", "skl2onnx", "ColumnTransformer (OneHotEncoder + StandardScaler) + "
         "LogisticRegression", skl_column_pipeline, SKL),
    Spec("hb_gbdt_tree_trav", "hummingbird-ml", "GradientBoostingClassifier, tree_trav", hb_gbdt_tree_trav, HB),
    Spec("hb_forest_perf_tree_trav", "hummingbird-ml", "RandomForestRegressor, perf_tree_trav",
         hb_forest_perf_tree_trav, HB),
    Spec("hb_forest_gemm", "hummingbird-ml", "RandomForestRegressor, gemm", hb_forest_gemm, HB),
]
