"""Plain PyTorch modules (graph message passing, beam search) and torchvision detectors of the corpus."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from export_common import Built, Inputs, ids, randn, seed
from torch import nn
from torch.export import Dim

# --------------------------------------------------------------------------------------------------
# Plain PyTorch modules written the way libraries write them
# --------------------------------------------------------------------------------------------------


class GCNLayerScatter(nn.Module):
    """Two rounds of GCN message passing as torch_geometric writes them with plain torch: gather the
    source nodes (``index_select``), normalise by degree (``scatter_add`` of ones), sum the messages into
    the targets (``scatter_add`` with the index broadcast over features, as torch_geometric's ``scatter``
    does), then a mean readout per graph (sum and count)."""

    def __init__(self, dim: int = 16, hidden: int = 16, graphs: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)
        self.graphs = graphs

    def propagate(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index[0], edge_index[1]
        n = x.shape[0]
        ones = torch.ones_like(dst, dtype=x.dtype)
        deg = torch.zeros(n, dtype=x.dtype).scatter_add(0, dst, ones) + 1.0
        norm = deg.rsqrt()
        messages = x.index_select(0, src) * (norm[src] * norm[dst]).unsqueeze(-1)
        # scatter_add, not index_add: the legacy exporter's index_add is wrong for repeated indices.
        out = torch.zeros_like(x).scatter_add(0, dst.unsqueeze(-1).expand_as(messages), messages)
        return out + x * (norm * norm).unsqueeze(-1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin1(self.propagate(x, edge_index)))
        h = torch.relu(self.lin2(self.propagate(h, edge_index)))
        index = batch.unsqueeze(-1).expand(-1, h.shape[1])
        # Mean readout as torch_geometric's scatter(reduce="mean") computes it: sum, then divide by the
        # count (scatter_reduce(reduce="mean") has no ONNX form in the legacy exporter, and dynamo's
        # translation of it disagrees with PyTorch).
        summed = torch.zeros(self.graphs, h.shape[1], dtype=h.dtype).scatter_add(0, index, h)
        count = torch.zeros(self.graphs, dtype=h.dtype).scatter_add(
            0, batch, torch.ones_like(batch, dtype=h.dtype)
        )
        pooled = summed / count.clamp(min=1.0).unsqueeze(-1)
        return self.head(pooled)


def build_gnn() -> Built:
    rng = seed(13)

    def sample(nodes: int, edges: int) -> Inputs:
        batch = np.sort(rng.integers(0, 4, size=nodes))
        batch[:4] = np.arange(4)  # every graph has a node
        batch = np.sort(batch)
        return {
            "x": randn(rng, nodes, 16),
            "edge_index": torch.from_numpy(rng.integers(0, nodes, size=(2, edges), dtype=np.int64)),
            "batch": torch.from_numpy(batch.astype(np.int64)),
        }

    nodes = Dim("num_nodes", min=4, max=1024)
    edges = Dim("num_edges", min=1, max=4096)
    return Built(
        GCNLayerScatter().eval(),
        sample(12, 30),
        ["graph_logits"],
        dynamo_shapes={"x": {0: nodes}, "edge_index": {1: edges}, "batch": {0: nodes}},
        legacy_axes={"x": {0: "num_nodes"}, "edge_index": {1: "num_edges"}, "batch": {0: "num_nodes"}},
        other_inputs=sample(20, 45),
    )


class BeamSearchStep(nn.Module):
    """One beam-search bookkeeping step as generation loops write it: reorder the cache by beam
    (``torch.gather`` along the beam axis via advanced indexing), pick each beam's last-token hidden
    state (``h[arange, lengths - 1]``), write the new token into a fixed token buffer (``index_put``),
    gather the chosen tokens' log-probs (``torch.gather``) and mark finished beams (``scatter``)."""

    def __init__(self, dim: int = 16, vocab: int = 64) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, vocab)

    def forward(
        self,
        cache: torch.Tensor,
        beam_idx: torch.Tensor,
        hidden: torch.Tensor,
        lengths: torch.Tensor,
        tokens: torch.Tensor,
        step: torch.Tensor,
        finished_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        beams = cache.shape[0]
        index = beam_idx.view(-1, 1, 1, 1).expand_as(cache)
        reordered = torch.gather(cache, 0, index)
        last = hidden[torch.arange(beams), lengths - 1]
        logp = torch.log_softmax(self.proj(last), dim=-1)
        best = logp.argmax(dim=-1, keepdim=True)
        best_logp = torch.gather(logp, 1, best).squeeze(1)
        new_tokens = tokens.clone()
        new_tokens[torch.arange(beams), step] = best.squeeze(1)
        finished = torch.zeros(beams, dtype=torch.float32).scatter(0, finished_ids, 1.0)
        return reordered, best_logp, new_tokens, finished


def build_beam_step() -> Built:
    rng = seed(14)

    def sample(beams: int) -> Inputs:
        return {
            "cache": randn(rng, beams, 2, 6, 8),
            "beam_idx": torch.from_numpy(rng.integers(0, beams, size=beams, dtype=np.int64)),
            "hidden": randn(rng, beams, 10, 16),
            "lengths": torch.from_numpy(rng.integers(1, 11, size=beams, dtype=np.int64)),
            "tokens": ids(rng, 64, beams, 12),
            "step": torch.from_numpy(rng.integers(0, 12, size=beams, dtype=np.int64)),
            "finished_ids": torch.from_numpy(rng.permutation(beams)[:2].astype(np.int64)),
        }

    beams = Dim("num_beams", min=2, max=16)
    shapes = {n: {0: beams} for n in ("cache", "beam_idx", "hidden", "lengths", "tokens", "step")}
    return Built(
        BeamSearchStep().eval(),
        sample(4),
        ["reordered_cache", "best_logprob", "new_tokens", "finished"],
        dynamo_shapes={**shapes, "finished_ids": None},
        legacy_axes={
            **{n: {0: "num_beams"} for n in shapes},
            **{n: {0: "num_beams"} for n in ("reordered_cache", "best_logprob", "new_tokens", "finished")},
        },
        other_inputs=sample(6),
    )


# --------------------------------------------------------------------------------------------------
# torchvision detection (If/Loop from the scripted parts of the postprocess)
# --------------------------------------------------------------------------------------------------


def _tiny_backbone(out_channels: int) -> nn.Module:
    body = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, out_channels, 3, stride=2, padding=1),
        nn.ReLU(),
    )
    body.out_channels = out_channels  # type: ignore[assignment]
    return body


class DetectionForward(nn.Module):
    """A torchvision detector on one image tensor, returning the first image's boxes/scores/labels."""

    def __init__(self, model: nn.Module, masks: bool = False) -> None:
        super().__init__()
        self.model = model
        self.masks = masks

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model([image])[0]
        result = (out["boxes"], out["scores"], out["labels"])
        return (*result, out["masks"]) if self.masks else result


def _rcnn(masks: bool) -> Built:
    from torchvision.models.detection import FasterRCNN, MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    rng = seed(15 if masks else 16)
    anchors = AnchorGenerator(sizes=((8, 16),), aspect_ratios=((0.5, 1.0, 2.0),))
    kwargs: dict[str, Any] = {
        "num_classes": 4,
        "min_size": 64,
        "max_size": 64,
        "rpn_anchor_generator": anchors,
        "box_roi_pool": MultiScaleRoIAlign(["0"], output_size=4, sampling_ratio=2),
        "rpn_pre_nms_top_n_test": 50,
        "rpn_post_nms_top_n_test": 20,
        "box_detections_per_img": 10,
        "box_score_thresh": 0.0,
        "representation_size": 32,
    }
    if masks:
        from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor

        kwargs["mask_roi_pool"] = MultiScaleRoIAlign(["0"], output_size=7, sampling_ratio=2)
        kwargs["mask_head"] = MaskRCNNHeads(16, (8,), 1)
        kwargs["mask_predictor"] = MaskRCNNPredictor(8, 8, 4)
    from torchvision.models.detection.faster_rcnn import TwoMLPHead

    rep = kwargs.pop("representation_size")
    kwargs["box_head"] = TwoMLPHead(16 * 4 * 4, rep)
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor

    kwargs["box_predictor"] = FastRCNNPredictor(rep, 4)
    kwargs.pop("num_classes")
    cls = MaskRCNN if masks else FasterRCNN
    model = cls(_tiny_backbone(16), num_classes=None, **kwargs).eval()
    outputs = ["boxes", "scores", "labels"] + (["masks"] if masks else [])
    image = torch.from_numpy(rng.random((3, 64, 64), dtype=np.float32))
    return Built(
        DetectionForward(model, masks),
        {"image": image},
        outputs,
        legacy_axes={n: {0: "num_detections"} for n in outputs},
        other_inputs={"image": torch.from_numpy(rng.random((3, 64, 64), dtype=np.float32))},
    )


def build_fasterrcnn() -> Built:
    return _rcnn(masks=False)


def build_maskrcnn() -> Built:
    return _rcnn(masks=True)
