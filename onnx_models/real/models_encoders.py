"""transformers encoders and encoder-decoders of the corpus (BERT, BART, T5, Whisper, Swin)."""

from __future__ import annotations

import numpy as np
import torch
from export_common import Built, Inputs, eager_attention, ids, randn, seed
from torch import nn
from torch.export import Dim

# --------------------------------------------------------------------------------------------------
# transformers encoders and encoder-decoders
# --------------------------------------------------------------------------------------------------


class BertForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


def _bert(dtype: torch.dtype) -> Built:
    from transformers import BertConfig, BertModel

    rng = seed(6)
    cfg = BertConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
    )
    model = BertModel(cfg).eval().to(dtype)

    def sample(b: int, s: int) -> Inputs:
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[-1, s - 2 :] = 0  # right padding on the last row
        types = torch.zeros(b, s, dtype=torch.int64)
        types[:, s // 2 :] = 1
        return {"input_ids": ids(rng, 300, b, s), "attention_mask": mask, "token_type_ids": types}

    batch = Dim("batch_size", min=1, max=8)
    seq = Dim("sequence_length", min=2, max=64)
    axes = {0: "batch_size", 1: "sequence_length"}
    return Built(
        BertForward(model),
        sample(2, 7),
        ["last_hidden_state", "pooler_output"],
        dynamo_shapes={n: {0: batch, 1: seq} for n in ("input_ids", "attention_mask", "token_type_ids")},
        legacy_axes={
            **{n: axes for n in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
            "pooler_output": {0: "batch_size"},
        },
        other_inputs=sample(3, 11),
    )


def build_bert() -> Built:
    return _bert(torch.float32)


def build_bert_fp16() -> Built:
    return _bert(torch.float16)


class Seq2SeqForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
        )
        return out.logits, out.encoder_last_hidden_state


def _seq2seq(model: nn.Module, vocab: int, seed: int) -> Built:
    rng = np.random.default_rng(seed)

    def sample(b: int, s: int, t: int) -> Inputs:
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, s - 2 :] = 0
        return {
            "input_ids": ids(rng, vocab, b, s),
            "attention_mask": mask,
            "decoder_input_ids": ids(rng, vocab, b, t),
        }

    batch = Dim("batch_size", min=1, max=8)
    src = Dim("encoder_sequence_length", min=2, max=48)
    tgt = Dim("decoder_sequence_length", min=1, max=48)
    return Built(
        Seq2SeqForward(model.eval()),
        sample(2, 8, 3),
        ["logits", "encoder_last_hidden_state"],
        dynamo_shapes={
            "input_ids": {0: batch, 1: src},
            "attention_mask": {0: batch, 1: src},
            "decoder_input_ids": {0: batch, 1: tgt},
        },
        legacy_axes={
            "input_ids": {0: "batch_size", 1: "encoder_sequence_length"},
            "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
            "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"},
            "encoder_last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length"},
        },
        other_inputs=sample(3, 5, 4),
    )


def build_bart() -> Built:
    from transformers import BartConfig, BartForConditionalGeneration

    seed(7)
    cfg = BartConfig(
        vocab_size=256,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    return _seq2seq(BartForConditionalGeneration(cfg), 256, seed=8)


def build_t5() -> Built:
    from transformers import T5Config, T5ForConditionalGeneration

    seed(9)
    cfg = T5Config(
        vocab_size=256,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        decoder_start_token_id=0,
    )
    return _seq2seq(eager_attention(T5ForConditionalGeneration(cfg)), 256, seed=10)


class Seq2SeqDecoderStep(nn.Module):
    """One decoder step of an encoder-decoder as generation runs it: the encoder output and the
    cross-attention keys/values are computed once and passed in, the self-attention past grows."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        past_key_0: torch.Tensor,
        past_value_0: torch.Tensor,
        cross_key_0: torch.Tensor,
        cross_value_0: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from transformers import DynamicCache, EncoderDecoderCache

        cfg = self.model.config
        cache = EncoderDecoderCache(
            DynamicCache([(past_key_0, past_value_0)], config=cfg),
            DynamicCache([(cross_key_0, cross_value_0)], config=cfg),
        )
        out = self.model.model.decoder(
            input_ids=decoder_input_ids,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            past_key_values=cache,
            use_cache=True,
        )
        logits = self.model.lm_head(out.last_hidden_state) + self.model.final_logits_bias
        sc = out.past_key_values.self_attention_cache.layers[0]
        return logits, sc.keys, sc.values


def build_bart_decoder_past() -> Built:
    from transformers import BartConfig, BartForConditionalGeneration

    rng = seed(19)
    cfg = BartConfig(
        vocab_size=256,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    model = BartForConditionalGeneration(cfg).eval()

    def sample(b, s, p):
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, s - 2 :] = 0
        return {
            "decoder_input_ids": ids(rng, 256, b, 1),
            "encoder_hidden_states": randn(rng, b, s, 32),
            "encoder_attention_mask": mask,
            "past_key_0": randn(rng, b, 2, p, 16),
            "past_value_0": randn(rng, b, 2, p, 16),
            "cross_key_0": randn(rng, b, 2, s, 16),
            "cross_value_0": randn(rng, b, 2, s, 16),
        }

    batch = Dim("batch_size", min=1, max=8)
    enc = Dim("encoder_sequence_length", min=2, max=48)
    past = Dim("past_decoder_sequence_length", min=1, max=48)
    ds = {
        "decoder_input_ids": {0: batch},
        "encoder_hidden_states": {0: batch, 1: enc},
        "encoder_attention_mask": {0: batch, 1: enc},
        "past_key_0": {0: batch, 2: past},
        "past_value_0": {0: batch, 2: past},
        "cross_key_0": {0: batch, 2: enc},
        "cross_value_0": {0: batch, 2: enc},
    }
    la = {
        "decoder_input_ids": {0: "batch_size"},
        "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
        "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
        "past_key_0": {0: "batch_size", 2: "past_decoder_sequence_length"},
        "past_value_0": {0: "batch_size", 2: "past_decoder_sequence_length"},
        "cross_key_0": {0: "batch_size", 2: "encoder_sequence_length"},
        "cross_value_0": {0: "batch_size", 2: "encoder_sequence_length"},
        "logits": {0: "batch_size"},
        "present_key_0": {0: "batch_size", 2: "total_decoder_sequence_length"},
        "present_value_0": {0: "batch_size", 2: "total_decoder_sequence_length"},
    }
    return Built(
        Seq2SeqDecoderStep(model),
        sample(2, 7, 3),
        ["logits", "present_key_0", "present_value_0"],
        dynamo_shapes=ds,
        legacy_axes=la,
        other_inputs=sample(3, 5, 6),
    )


class WhisperForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_features=input_features, decoder_input_ids=decoder_input_ids, use_cache=False)
        return out.logits


def build_whisper() -> Built:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    rng = seed(11)
    cfg = WhisperConfig(
        vocab_size=128,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    model = WhisperForConditionalGeneration(cfg).eval()
    tgt = Dim("decoder_sequence_length", min=1, max=32)
    batch = Dim("batch_size", min=1, max=8)

    def sample(b: int, t: int) -> Inputs:
        return {"input_features": randn(rng, b, 8, 32), "decoder_input_ids": ids(rng, 128, b, t)}

    return Built(
        WhisperForward(model),
        sample(1, 4),
        ["logits"],
        dynamo_shapes={"input_features": {0: batch}, "decoder_input_ids": {0: batch, 1: tgt}},
        legacy_axes={
            "input_features": {0: "batch_size"},
            "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"},
        },
        other_inputs=sample(2, 3),
    )


class SwinForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def build_swin() -> Built:
    from transformers import SwinConfig, SwinForImageClassification

    rng = seed(12)
    cfg = SwinConfig(
        image_size=32,
        patch_size=4,
        num_channels=3,
        embed_dim=16,
        depths=[2, 1],
        num_heads=[2, 2],
        window_size=4,
        mlp_ratio=2.0,
        num_labels=10,
    )
    model = eager_attention(SwinForImageClassification(cfg)).eval()
    batch = Dim("batch_size", min=1, max=8)
    return Built(
        SwinForward(model),
        {"pixel_values": randn(rng, 2, 3, 32, 32)},
        ["logits"],
        dynamo_shapes={"pixel_values": {0: batch}},
        legacy_axes={"pixel_values": {0: "batch_size"}, "logits": {0: "batch_size"}},
        other_inputs={"pixel_values": randn(rng, 3, 3, 32, 32)},
    )
