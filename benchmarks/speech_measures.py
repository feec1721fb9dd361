"""What the quality benchmarks measure in audio, as a listener would hear it: pure numpy, plus
``parselmouth`` for pitch and ``pocketsphinx`` for words (both imported when used). Frames are
10 ms windows (:data:`backends.engine.joins.WINDOW`): a DTW path between two readings of one text
(:func:`align`), runs of silence (:func:`silent_runs`, :func:`run_at`), F0 and the pitch before a
cut (:func:`pitch`, :func:`cut_pitch`), 2–8 kHz energy across a join (:func:`band_db`), the
log-spectral distance of two renderings, and what pocketsphinx hears (:class:`Transcriber`,
:func:`words_heard`, :func:`word_edits`). docs/speech-quality.md says how they are used.
"""

from __future__ import annotations

import re

import numpy as np

from backends.engine.joins import SILENCE_DB, WINDOW, window_db

SR = 24_000
HOP_S = WINDOW / SR  # 10 ms


def _stft_power(audio: np.ndarray, n_fft: int = 512, hop: int = WINDOW, centred: bool = True) -> np.ndarray:
    """Power spectra of Hann-windowed frames ``hop`` apart; ``centred``: frame ``k`` centred on
    sample ``k * hop``, one frame per hop of audio (zeros beyond it), else frames from sample 0."""
    x = np.asarray(audio, np.float64)
    n = max(1, -(-len(x) // hop))
    if centred:
        x = np.pad(x, (n_fft // 2, n * hop + n_fft // 2 - len(x)))
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[::hop][: n if centred else None]
    return np.abs(np.fft.rfft(frames * np.hanning(n_fft), axis=1)) ** 2


def log_spectral_distance(a: np.ndarray, b: np.ndarray, *, n_fft: int = 512, hop: int = WINDOW,
                          centred: bool = True, speech_only: bool = False) -> float:
    """dB: the RMS over bins of the two log-power spectra's difference, averaged over the frames
    (:func:`_stft_power`'s), or with ``speech_only`` over the 10 ms frames where ``b`` speaks; 0 for
    identical audio. Audio of different lengths is compared over the shorter one."""
    n = min(len(a), len(b))
    if not centred and n < n_fft:
        return 0.0 if np.array_equal(a[:n], b[:n]) else float("inf")
    la, lb = (10 * np.log10(_stft_power(x[:n], n_fft, hop, centred) + 1e-10) for x in (a, b))
    per_frame = np.sqrt(((la - lb) ** 2).mean(axis=1))
    return float(per_frame[window_db(b[:n]) > SILENCE_DB].mean() if speech_only else per_frame.mean())


def _mel_bank(n_mels: int = 40, n_fft: int = 512) -> np.ndarray:
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    hz = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    edges = hz(np.linspace(mel(60), mel(8000), n_mels + 2))
    bins = np.fft.rfftfreq(n_fft, 1 / SR)
    bank = np.zeros((n_mels, len(bins)))
    for i in range(n_mels):
        lo, mid, hi = edges[i : i + 3]
        bank[i] = np.clip(np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), 0, None)
    return bank


_BANK = _mel_bank()


def log_mel(audio: np.ndarray) -> np.ndarray:
    """Log-mel frames (10 ms hop), floored at −80 dB so any two silences look alike."""
    mel = _stft_power(audio) @ _BANK.T
    return np.maximum(10 * np.log10(mel + 1e-12), -80.0)


def align(streamed: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """For each 10 ms frame of ``streamed``, the aligned frame of ``reference`` (DTW, Euclidean cost
    on log-mel frames; each row is solved with a prefix minimum, so the loop is over rows only)."""
    a, b = log_mel(streamed), log_mel(reference)
    sq = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2 * a @ b.T
    cost = np.sqrt(np.maximum(sq, 0.0))
    n, m = cost.shape
    acc = np.empty((n, m))
    acc[0] = np.cumsum(cost[0])
    for i in range(1, n):
        prev = acc[i - 1]
        best = cost[i] + np.minimum(prev, np.concatenate([[np.inf], prev[:-1]]))  # from above or diagonal
        run = np.cumsum(cost[i])  # then along the row: acc[i, j] = min over k <= j of best[k] + cost[i, k+1..j]
        acc[i] = np.minimum.accumulate(best - run) + run
    path = np.zeros(n, dtype=np.int64)
    i, j = n - 1, m - 1
    path[i] = j
    while i > 0 or j > 0:
        if i == 0 or j == 0:
            i, j = (i, j - 1) if i == 0 else (i - 1, j)
        else:
            _, i, j = min((acc[i - 1, j - 1], i - 1, j - 1), (acc[i - 1, j], i - 1, j), (acc[i, j - 1], i, j - 1))
        path[i] = min(path[i], j) if path[i] else j
    return path


def silent_runs(audio: np.ndarray, min_s: float = 0.0) -> list[tuple[int, int]]:
    """(first, one past the last) window of each run of windows below ``SILENCE_DB`` at least ``min_s``
    long."""
    quiet = np.concatenate([[False], window_db(audio) <= SILENCE_DB, [False]])
    edges = np.flatnonzero(np.diff(quiet.astype(np.int8)))
    runs = list(zip(edges[::2], edges[1::2], strict=True))
    return [(int(s), int(e)) for s, e in runs if (e - s) * HOP_S >= min_s]


def run_at(runs: list[tuple[int, int]], frame: int, slack: int = 2) -> tuple[int, int] | None:
    """The silent run holding ``frame`` (or within ``slack`` frames of it)."""
    for s, e in runs:
        if s - slack <= frame < e + slack:
            return s, e
    return None


def pitch(audio: np.ndarray) -> np.ndarray:
    """F0 in Hz per 10 ms frame (0: unvoiced), frame ``k`` centred at ``k * 10 ms + 5 ms``."""
    import parselmouth

    snd = parselmouth.Sound(audio.astype(np.float64), sampling_frequency=SR)
    track = snd.to_pitch(time_step=HOP_S, pitch_floor=60.0, pitch_ceiling=400.0)
    f0 = track.selected_array["frequency"]
    out = np.zeros(-(-len(audio) // WINDOW))
    frames = np.clip(np.round((track.xs() - HOP_S / 2) / HOP_S).astype(int), 0, len(out) - 1)
    out[frames] = f0
    return out


def semitones(a: float, b: float) -> float:
    return float(12 * np.log2(a / b))


def cut_pitch(f0_streamed: np.ndarray, f0_reference: np.ndarray, path: np.ndarray, end: int,
              span_s: float = 0.2) -> tuple[float, float] | None:
    """(streamed Hz, reference Hz): medians over the voiced frames of the last ``span_s`` of speech
    before frame ``end`` and the reference's voiced frames aligned to them; None when too few voiced."""
    voiced = [k for k in range(max(0, end - 60), end) if f0_streamed[k] > 0]
    voiced = [k for k in voiced if k >= (voiced[-1] if voiced else 0) - round(span_s / HOP_S)]
    ref = [f0_reference[path[k]] for k in voiced if f0_reference[path[k]] > 0]
    if len(voiced) < 3 or len(ref) < 3:
        return None
    return float(np.median(f0_streamed[voiced])), float(np.median(ref))


def band_db(audio: np.ndarray, at: int, low: float = 2000.0, high: float = 8000.0) -> float:
    """2–8 kHz energy in the 20 ms around sample ``at``, dB re that band's mean over the speech."""
    power = _stft_power(audio)
    bins = np.fft.rfftfreq(512, 1 / SR)
    band = power[:, (bins >= low) & (bins <= high)].sum(axis=1)
    loud = window_db(audio) > SILENCE_DB
    speech = band[: len(loud)][loud[: len(band)]].mean() if loud.any() else 1.0
    k = at // WINDOW
    around = band[max(0, k - 1) : k + 1].mean()
    return float(10 * np.log10(max(around, 1e-20) / max(speech, 1e-20)))


def words(text: str) -> list[str]:
    """The words of ``text`` as a recogniser writes them: lower case, letters and apostrophes."""
    return re.findall(r"[a-z']+", text.lower())


def word_edits(reference: list[str], heard: list[str]) -> int:
    """Word edits (insertions, deletions, substitutions) from ``reference`` to ``heard``."""
    d = list(range(len(heard) + 1))
    for i, r in enumerate(reference, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(heard, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(heard)]


class Transcriber:
    """pocketsphinx (its bundled en-us model) on float audio: the lower-case words it hears."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self.decoder = Decoder(samprate=16000)

    def __call__(self, audio: np.ndarray, rate: int = SR) -> list[str]:
        import soxr

        pcm = (np.clip(soxr.resample(audio, rate, 16000), -1, 1) * 32767).astype(np.int16).tobytes()
        self.decoder.start_utt()
        self.decoder.process_raw(pcm, full_utt=True)
        self.decoder.end_utt()
        hyp = self.decoder.hyp()
        return [w for w in hyp.hypstr.lower().split() if not w.startswith("<")] if hyp else []


_TRANSCRIBER: Transcriber | None = None


def words_heard(audio: np.ndarray, text: str) -> float:
    """The share of ``text``'s words pocketsphinx hears anywhere in ``audio``."""
    global _TRANSCRIBER
    _TRANSCRIBER = _TRANSCRIBER or Transcriber()
    heard = set(_TRANSCRIBER(audio))
    expected = words(text)
    return sum(w in heard for w in expected) / max(1, len(expected))
