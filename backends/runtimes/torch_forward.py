"""A batched, masked forward pass over ``KModel``'s modules.

``KModel.forward_with_tokens`` takes one utterance. Batching utterances of different lengths needs
more than padding, because several layers look along the whole time axis:

* bidirectional LSTMs read padding backwards into the last real step -> packed sequences;
* every ``InstanceNorm1d`` (AdaIN, ~140 of them) takes mean/variance over time -> masked statistics;
* convolutions and transposed convolutions read their neighbours -> inputs zeroed past each item's
  end, which is exactly the zero padding an unbatched call sees;
* the sine source's phase is linearly interpolated and its STFT reflect-pads at the signal's end,
  and the iSTFT normalises by the window envelope of the frames present -> done per item (edge
  replication, per-item reflection, per-item envelope).

So each item of a batch gets what it would get alone, up to float rounding (see
``tests/integration/test_torch_runtime.py`` for the tolerance). Expanding tokens to frames is a
gather by token index (bit-exact, unlike a one-hot matmul under TF32/half precision).

The modules are KModel's own (weights, convs, LSTMs); only the glue between them lives here.
Pure tensor code: no locks, no I/O. Call under ``torch.inference_mode()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import backends.runtimes.windowing as windows


@dataclass
class BatchResult:
    audio: torch.Tensor  # (B, samples), float32, zero past each item's end
    audio_lengths: torch.Tensor  # (B,) samples per item, on the CPU
    durations: torch.Tensor  # (B, T) frames per input token (bos, phonemes, eos), 0 for padding
    token_lengths: torch.Tensor  # (B,) input tokens per item, including bos/eos, on the CPU


Mask = torch.Tensor | None  # (B, 1, T) float, 1 inside an item; None when no item is padded


def _mask(lengths: torch.Tensor, size: int, device: torch.device) -> Mask:
    """The padding mask for items of ``lengths`` (a CPU tensor, so deciding needs no device sync)
    in a tensor of ``size`` steps; None when no item is padded."""
    if bool((lengths >= size).all()):
        return None
    lengths = lengths.to(device, non_blocking=True)
    return (torch.arange(size, device=device)[None, :] < lengths[:, None]).unsqueeze(1).float()


def _wide(x: torch.Tensor) -> torch.Tensor:
    """At least float32 (half-precision activations get float32 statistics and phases)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _masked(x: torch.Tensor, m: Mask) -> torch.Tensor:
    return x if m is None else x * m.to(x.dtype)


def _repeat(m: Mask, factor: int) -> Mask:
    return None if m is None else m.repeat_interleave(factor, dim=-1)


def _lstm(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A batch-first bidirectional LSTM over packed sequences, padded back to x's length."""
    if bool((lengths >= x.shape[1]).all()):
        whole: torch.Tensor = lstm(x)[0]
        return whole
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, _ = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out


def _adain(block: Any, x: torch.Tensor, s: torch.Tensor, m: Mask) -> torch.Tensor:
    """AdaIN1d with instance statistics over each item's valid frames only; output zero past them."""
    norm = block.norm
    xf = _wide(x)
    gamma, beta = torch.chunk(block.fc(s).to(xf.dtype)[..., None], chunks=2, dim=1)
    if m is None:
        var, mean = torch.var_mean(xf, dim=-1, keepdim=True, correction=0)
    else:
        n = m.sum(-1, keepdim=True).clamp(min=1)
        mean = (xf * m).sum(-1, keepdim=True) / n
        var = (((xf - mean) * m) ** 2).sum(-1, keepdim=True) / n
    scale = torch.rsqrt(var + norm.eps) * (1 + gamma)
    shift = beta
    if norm.weight is not None:
        scale = scale * norm.weight[None, :, None].to(xf.dtype)
        shift = shift + (1 + gamma) * norm.bias[None, :, None].to(xf.dtype)
    return _masked(torch.addcmul(shift - mean * scale, xf, scale).to(x.dtype), m)


def _res_block(blk: Any, x: torch.Tensor, s: torch.Tensor, m: Mask) -> tuple[torch.Tensor, Mask]:
    """AdainResBlk1d (predictor F0/N, decoder encode/decode); returns (output, its mask).
    ``x`` is zero past each item's end; so is the output."""
    out = blk.actv(_adain(blk.norm1, x, s, m))
    m_out = m
    if blk.upsample_type != "none":
        out = blk.pool(out)
        m_out = _repeat(m, 2)
        out = _masked(out, m_out)
    out = blk.actv(_adain(blk.norm2, blk.conv1(out), s, m_out))
    out = blk.conv2(out)
    return _masked((out + blk._shortcut(x)) * (2**-0.5), m_out), m_out


def _snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    return x + (1 / alpha) * torch.sin(alpha * x) ** 2


def _res_block1(blk: Any, x: torch.Tensor, s: torch.Tensor, m: Mask) -> torch.Tensor:
    """AdaINResBlock1 (generator resblocks and noise_res); ``x`` and the output are zero past the
    end (the snake of 0 is 0, so masking after AdaIN keeps conv inputs clean)."""
    blocks = zip(blk.convs1, blk.convs2, blk.adain1, blk.adain2, blk.alpha1, blk.alpha2, strict=True)
    for c1, c2, n1, n2, a1, a2 in blocks:
        xt = c1(_snake(_adain(n1, x, s, m), a1))
        xt = c2(_snake(_adain(n2, xt, s, m), a2))
        x = _masked(xt + x, m)
    return x


def _f0_n(
    pred: Any, en: torch.Tensor, s: torch.Tensor, frames: torch.Tensor, m: Mask
) -> tuple[torch.Tensor, torch.Tensor]:
    """ProsodyPredictor.F0Ntrain, masked: F0 and N curves (B, 2 * frames), zero past each end.
    Lengths (``frames`` here, ``n_*`` below) are CPU tensors throughout."""
    x = _lstm(pred.shared, en.transpose(-1, -2), frames).transpose(-1, -2)
    curves = []
    for blocks, proj in ((pred.F0, pred.F0_proj), (pred.N, pred.N_proj)):
        y, my = x, m
        for block in blocks:
            y, my = _res_block(block, y, s, my)
        curves.append(_masked(proj(y), my).squeeze(1))
    return curves[0], curves[1]


def _sine_source(gen: Any, f0: torch.Tensor, n_f0: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """SourceModuleHnNSF: the harmonic excitation (B, samples) in float32, each item as if alone.
    ``f0`` is zero past each item's ``n_f0`` steps."""
    sg = gen.m_source.l_sin_gen
    upp = sg.upsample_scale
    f0 = _wide(f0)
    up = gen.f0_upsamp(f0[:, None]).transpose(1, 2)  # (B, samples, 1), nearest
    harmonics = torch.arange(1, sg.harmonic_num + 2, device=f0.device, dtype=f0.dtype)
    rad = (up * harmonics / sg.sampling_rate) % 1
    if not deterministic:
        rand_ini = torch.rand(rad.shape[0], rad.shape[2], device=rad.device, dtype=rad.dtype)
        rand_ini[:, 0] = 0
        rad[:, 0, :] = rad[:, 0, :] + rand_ini
    rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / upp, mode="linear").transpose(1, 2)
    phase = torch.cumsum(rad, dim=1) * 2 * math.pi
    if bool((n_f0 < phase.shape[1]).any()):
        # Hold each item's last phase past its end: interpolation then sees what it sees unpadded.
        n_dev = n_f0.to(f0.device, non_blocking=True)
        last = (n_dev - 1).clamp(min=0)[:, None, None].expand(-1, 1, phase.shape[2])
        inside = torch.arange(phase.shape[1], device=f0.device)[None, :, None] < n_dev[:, None, None]
        phase = torch.where(inside, phase, phase.gather(1, last))
    phase = F.interpolate(phase.transpose(1, 2) * upp, scale_factor=upp, mode="linear").transpose(1, 2)
    sines = torch.sin(phase) * sg.sine_amp
    uv = (up > sg.voiced_threshold).float()
    waves = sines * uv
    if not deterministic:
        noise_amp = uv * sg.noise_std + (1 - uv) * sg.sine_amp / 3
        waves = waves + noise_amp * torch.randn_like(sines)
    lin = gen.m_source.l_linear
    return torch.tanh(F.linear(waves, lin.weight.to(waves.dtype), lin.bias.to(waves.dtype))).squeeze(-1)


def _stft(x: torch.Tensor, n: torch.Tensor, n_fft: int, hop: int, window: torch.Tensor) -> torch.Tensor:
    """(|STFT|, phase) of each item's first n[b] samples, reflect-padded at its own ends, as
    ``torch.stft(center=True)`` of that item alone."""
    pad = n_fft // 2
    n = n.to(x.device, non_blocking=True)
    pos = torch.arange(x.shape[1] + 2 * pad, device=x.device) - pad
    q = pos[None].expand(x.shape[0], -1)
    q = torch.where(q < 0, -q, q)
    q = torch.where(q >= n[:, None], 2 * (n[:, None] - 1) - q, q)
    inside = pos[None] < (n[:, None] + pad)
    padded = x.gather(1, q.clamp(0, x.shape[1] - 1)) * inside
    spec = torch.stft(padded, n_fft, hop, n_fft, window=window, center=False, return_complex=True)
    return torch.cat([spec.abs(), spec.angle()], dim=1)


def _istft(
    mag: torch.Tensor, phase: torch.Tensor, fm: Mask, n_fft: int, hop: int, window: torch.Tensor
) -> torch.Tensor:
    """``torch.istft(center=True)`` per item: overlap-add normalised by the window envelope of the
    item's own frames (``fm``), so an item's last samples do not see its neighbours' padding."""
    b, _, k = mag.shape
    frames = _masked(torch.fft.irfft(torch.polar(mag, phase), n=n_fft, dim=1) * window[None, :, None], fm)
    size = (1, (k - 1) * hop + n_fft)
    ola = F.fold(frames, size, kernel_size=(1, n_fft), stride=(1, hop)).reshape(b, -1)
    weights = (window**2)[None, :, None].expand(1 if fm is None else b, n_fft, k)
    env = F.fold(_masked(weights, fm), size, (1, n_fft), stride=(1, hop)).reshape(weights.shape[0], -1)
    out = torch.where(env > 1e-11, ola / env.clamp(min=1e-11), torch.zeros_like(ola))
    return out[:, n_fft // 2 : n_fft // 2 + (k - 1) * hop]


def _generator(
    gen: Any, x: torch.Tensor, s: torch.Tensor, f0: torch.Tensor, n_f0: torch.Tensor, deterministic: bool,
    source: torch.Tensor | None = None,
) -> torch.Tensor:
    """Generator.forward, masked; ``x`` and ``f0`` have ``n_f0`` valid steps per item. ``source``:
    the harmonic excitation when the caller made it (a window's slice of its sentence's)."""
    n_fft, hop = gen.stft.filter_length, gen.stft.hop_length
    window = torch.hann_window(n_fft, periodic=True, dtype=_wide(x).dtype, device=x.device)
    with torch.autocast(x.device.type, enabled=False):
        if source is None:
            source = _sine_source(gen, f0, n_f0, deterministic)
        n_samples = n_f0 * gen.m_source.l_sin_gen.upsample_scale
        har = _stft(source, n_samples, n_fft, hop, window)
    k = har.shape[-1]
    fm = _mask(n_samples // hop + 1, k, x.device)  # valid STFT frames per item
    har = _masked(har, fm).to(x.dtype)
    n = n_f0
    for i in range(gen.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        rate = gen.ups[i].stride[0]
        x = gen.ups[i](x)
        n = n * rate
        x_source = gen.noise_convs[i](har)
        if i == gen.num_upsamples - 1:
            x = gen.reflection_pad(x)
            n = n + 1
        m = _mask(n, x.shape[-1], x.device)
        x_source = _res_block1(gen.noise_res[i], _masked(x_source, m), s, m)
        x = _masked(x, m) + x_source
        xs = sum(_res_block1(gen.resblocks[i * gen.num_kernels + j], x, s, m) for j in range(gen.num_kernels))
        x = xs / gen.num_kernels
    x = gen.conv_post(F.leaky_relu(x))
    with torch.autocast(x.device.type, enabled=False):
        x = _wide(x)
        half = gen.post_n_fft // 2 + 1
        return _istft(torch.exp(x[:, :half]), torch.sin(x[:, half:]), fm, n_fft, hop, window)


def _decoder(
    dec: Any, asr: torch.Tensor, f0: torch.Tensor, n_curve: torch.Tensor, s: torch.Tensor, frames: torch.Tensor,
    deterministic: bool, source: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decoder.forward, masked; ``asr`` has ``frames`` valid steps, the curves twice as many."""
    mf = _mask(frames, asr.shape[-1], asr.device)
    f0_c = _masked(dec.F0_conv(f0[:, None].to(asr.dtype)), mf)
    n_c = _masked(dec.N_conv(n_curve[:, None].to(asr.dtype)), mf)
    x, m = _res_block(dec.encode, torch.cat([asr, f0_c, n_c], dim=1), s, mf)
    asr_res = _masked(dec.asr_res(asr), mf)
    res = True
    for block in dec.decode:
        if res:
            x = torch.cat([x, asr_res, f0_c, n_c], dim=1)
        x, m = _res_block(block, x, s, m)
        if block.upsample_type != "none":
            res = False
    return _generator(dec.generator, x, s, f0, frames * 2, deterministic, source)


@dataclass
class Prosody:
    """What the text encoder and the prosody predictor make of a batch, before the decoder."""

    durations: torch.Tensor  # (B, T) frames per input token (bos, phonemes, eos), 0 for padding
    token_lengths: torch.Tensor  # (B,) input tokens per item, including bos/eos, on the CPU
    frames: torch.Tensor  # (B,) frames per item, on the CPU
    asr: torch.Tensor  # (B, C, frames) aligned text features
    f0: torch.Tensor  # (B, 2 * frames) F0 curve
    n_curve: torch.Tensor  # (B, 2 * frames) energy curve


def predict(model: Any, tokens: list[list[int]], styles: torch.Tensor, speeds: torch.Tensor) -> Prosody:
    """The text encoder and prosody predictor of :func:`forward_batch` (durations, F0, energy and
    the aligned features the decoder reads); deterministic."""
    device = styles.device
    lengths = torch.tensor([len(t) + 2 for t in tokens])
    width = int(lengths.max())
    ids = torch.zeros((len(tokens), width), dtype=torch.long)
    for i, t in enumerate(tokens):
        ids[i, 1 : 1 + len(t)] = torch.tensor(t, dtype=torch.long)
    ids, lengths_d = ids.to(device), lengths.to(device)
    pad = torch.arange(width, device=device)[None, :] >= lengths_d[:, None]  # KModel's text_mask

    bert = model.bert(ids, attention_mask=(~pad).int())
    d_en = _masked(model.bert_encoder(bert).transpose(-1, -2), _mask(lengths, width, device))
    s_pro = styles[:, 128:]
    # KModel's encoders build float32 zero buffers internally: bring results back to the model's dtype.
    d = model.predictor.text_encoder(d_en, s_pro, lengths, pad).to(styles.dtype)
    x = _lstm(model.predictor.lstm, d, lengths)
    duration = torch.sigmoid(_wide(model.predictor.duration_proj(x))).sum(-1) / speeds[:, None]
    durations = torch.round(duration).clamp(min=1).long() * (~pad)

    # The alignment, as a gather: frame f reads the token whose cumulative duration first exceeds f.
    frames = durations.sum(1).cpu()  # the one device sync: everything after is sized by it
    n_frames = int(frames.max())
    ends = torch.cumsum(durations, dim=1)
    grid = torch.arange(n_frames, device=device)[None, :].expand(len(tokens), -1).contiguous()
    token_of_frame = torch.searchsorted(ends, grid, right=True).clamp(max=width - 1)
    mf = _mask(frames, n_frames, device)

    def expand(h: torch.Tensor) -> torch.Tensor:  # (B, C, tokens) -> (B, C, frames)
        return _masked(h.gather(2, token_of_frame[:, None, :].expand(-1, h.shape[1], -1)), mf)

    f0, n_curve = _f0_n(model.predictor, expand(d.transpose(-1, -2)), s_pro, frames, mf)
    asr = expand(model.text_encoder(ids, lengths, pad).to(styles.dtype))
    return Prosody(durations, lengths, frames, asr, f0, n_curve)


def forward_batch(
    model: Any,
    tokens: list[list[int]],
    styles: torch.Tensor,
    speeds: torch.Tensor,
    *,
    deterministic: bool = False,
) -> BatchResult:
    """Synthesise a batch. ``tokens``: vocabulary ids per item *without* bos/eos; ``styles``:
    (B, 256) voice rows; ``speeds``: (B,). ``deterministic`` drops the sine source's random initial
    phases and noise (as the ONNX export does), making the output a pure function of the input."""
    p = predict(model, tokens, styles, speeds)
    audio = _decoder(model.decoder, p.asr, p.f0, p.n_curve, styles[:, :128], p.frames, deterministic)
    samples = p.frames * 2 * model.decoder.generator.m_source.l_sin_gen.upsample_scale
    m_audio = _mask(samples, audio.shape[-1], styles.device)
    if m_audio is not None:
        audio = audio * m_audio.squeeze(1)
    return BatchResult(audio=audio, audio_lengths=samples, durations=p.durations, token_lengths=p.token_lengths)


def boundary_frame(p: Prosody, token: int, n_tokens: int) -> int:
    """The frame where a window of one sentence (``p``: batch of one) ends before the sentence's
    token ``token``: :func:`backends.runtimes.windowing.boundary_frame` of its durations and energy."""
    return windows.boundary_frame(p.durations[0].cpu().numpy(), p.n_curve[0].float().cpu().numpy(), token, n_tokens)


def decode_window(
    model: Any, p: Prosody, style: torch.Tensor, start: int, stop: int, context: int
) -> torch.Tensor:
    """The audio of frames ``start`` to ``stop`` of one sentence (``p``: its :func:`predict`, batch
    of one), decoded over those frames and ``context`` more on each side, then cropped: a window of
    the sentence's reading. The sine source is the whole sentence's, deterministic, sliced at the
    window, so consecutive windows meet in phase; the decoder's instance norms see the window."""
    gen = model.decoder.generator
    per_frame = 2 * gen.m_source.l_sin_gen.upsample_scale
    total = int(p.frames[0])
    lo, hi = windows.decode_range(start, stop, total, context)
    with torch.autocast(style.device.type, enabled=False):
        source = _sine_source(gen, p.f0, p.frames * 2, True)[:, lo * per_frame : hi * per_frame]
    audio = _decoder(model.decoder, p.asr[:, :, lo:hi], p.f0[:, 2 * lo : 2 * hi], p.n_curve[:, 2 * lo : 2 * hi],
                     style[:, :128], torch.tensor([hi - lo]), True, source)
    return audio[0, (start - lo) * per_frame : (stop - lo) * per_frame]
