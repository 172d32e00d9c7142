"""Gradient-boosted trees converted by onnxmltools: a LightGBM classifier (its label output declared [1]
while it holds one label per row), a LightGBM regressor split into several TreeEnsembleRegressor nodes,
and an XGBoost classifier whose model imports only the ai.onnx.ml domain. No gather/scatter node: dmlshim
has nothing to emulate and must still answer every command."""

from __future__ import annotations

import numpy as np
import onnx
from eco_common import Built, Spec

PACKAGES = ("onnxmltools", "lightgbm", "xgboost")


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, 6)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int) + (x[:, 3] > 1)
    return x, y


def _types() -> list[tuple[str, object]]:
    from onnxmltools.convert.common.data_types import FloatTensorType

    return [("X", FloatTensorType([None, 6]))]


def _fix(model: onnx.ModelProto, x: np.ndarray) -> Built:
    model.ir_version = min(model.ir_version, 10)
    return Built(model, {"X": x})


def lgbm_classifier() -> Built:
    import lightgbm as lgb
    from onnxmltools import convert_lightgbm

    x, y = _data()
    clf = lgb.LGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1).fit(x, y)
    return _fix(convert_lightgbm(clf, initial_types=_types(), target_opset=15, zipmap=False), x[:7])


def lgbm_regressor_split() -> Built:
    import lightgbm as lgb
    from onnxmltools import convert_lightgbm

    x, _ = _data()
    reg = lgb.LGBMRegressor(n_estimators=30, num_leaves=16, verbose=-1).fit(x, x[:, 0] * 2)
    return _fix(convert_lightgbm(reg, initial_types=_types(), target_opset=15, split=10), x[:9])


def xgb_classifier() -> Built:
    import xgboost as xgb
    from onnxmltools import convert_xgboost

    x, y = _data()
    clf = xgb.XGBClassifier(n_estimators=15, max_depth=3).fit(x, y)
    return _fix(convert_xgboost(clf, initial_types=_types(), target_opset=15), x[:5])


SPECS: list[Spec] = [
    Spec(
        "mlt_lgbm_classifier",
        "onnxmltools",
        "LightGBM classifier, no ZipMap (label declared [1], one per row)",
        lgbm_classifier,
        PACKAGES,
    ),
    Spec(
        "mlt_lgbm_regressor_split",
        "onnxmltools",
        "LightGBM regressor split into 3 TreeEnsembleRegressor nodes",
        lgbm_regressor_split,
        PACKAGES,
    ),
    Spec(
        "mlt_xgb_classifier",
        "onnxmltools",
        "XGBoost classifier; the model imports only ai.onnx.ml",
        xgb_classifier,
        PACKAGES,
    ),
]
