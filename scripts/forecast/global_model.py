"""The global forecaster: one small residual MLP for every series and frequency, trained on the corpus in minutes on
one CPU core, exported to ONNX and parity-gated against torch. Design, contract and results: docs/forecasting_model.md.

Graph (all in the scaled space of families/forecast/features.py; f = the sample's frequency):
    x       = context * mask                                              [B, C]
    naive   = x[C - m_f + (k mod m_f)],  naive2 the same for SEASON2[f]     [B, H]  seasonal naive inside the graph
    d       = mean |x_j - x_{j-m_f}| over the last D_WINDOW[f] positions   [B]     (lag 1 if no such pair), floored
    r       = clip((x - x_last) / d) * mask                                the context in units of its recent change
    z       = relu(W_in [x, r / 10, embed(f), features]) * (1 + g_f) + b_f  FiLM by frequency
    z       = z + W2 relu(W1 LayerNorm(z))   (blocks times)                 TiDE / N-BEATS residual MLP blocks
    out     = (W_out LayerNorm(z)) * (1 + a_f) + c_f                        [B, H, Q] in units of d
    skip    = (W_lin r[-64:])[f]                                           per-frequency linear lookback skip (TiDE)
    median  = naive + gate_f * (naive2 - naive) + d * (out[..., 0.5] + skip)
    q_below = median - d * reverse-cumsum softplus(out[..., q < 0.5])       quantiles cannot cross, by construction
    q_above = median + d * cumsum softplus(out[..., q > 0.5])
Training (WindowSampler): random cut points (half of them in the last 3 horizons of each series' training part),
20 % of contexts truncated, 50 % of windows a TSMixup of two same-frequency windows; loss = mean over windows of
log(0.02 + weight * pinball), the window's pinball averaged over quantiles and valid steps in units of the context's
seasonal-naive MAE: the log of a geometric mean, like the geometric-mean MASE ratio the benchmark scores.
After training, calibrate_spread scales each frequency's lower/upper quantile offsets (spread_scale, in the graph) to
minimise the pinball loss on the training series' last windows (their validation split).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from scripts.forecast.corpus import Series, last_window
from triserve.families.forecast.features import (
    CONTEXT,
    CONTEXT_BY_FREQ,
    FREQ_INDEX,
    FREQUENCIES,
    H_MAX,
    INPUT_NAMES,
    MAX_HORIZON,
    MEDIAN_INDEX,
    MIN_HISTORY,
    N_FEATURES,
    OUTPUT_NAME,
    QUANTILES,
    SEASON,
    SEASON2,
    calendar_features,
    scale_context,
    scale_targets,
    scaling_stats,
    seasonal_index_table,
    series_features,
)

log = logging.getLogger("triserve.forecast.global_model")
OPSET = 17
# d (the output unit) is the seasonal-naive MAE over the last D_WINDOW points of the context: recent change, so an
# exponentially growing series is measured by its current steps, not by its early small ones
D_WINDOW = {"YS": 12, "QS": 20, "MS": 60, "W": 156, "D": 56, "h": 336, "30min": 336, "15min": 384, "min": 240}
END_HORIZONS = 3
SKIP_POINTS = 64  # the linear skip reads the last SKIP_POINTS of the d-relative context
R_CLIP = 100.0  # the d-relative context is clipped to +-R_CLIP and fed to the MLP divided by R_SCALE
R_SCALE = 10.0
D_FLOOR = 0.01  # floor of the in-context seasonal-naive MAE (scaled units) that sets the output unit


def lag_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per frequency [9, C]: index of position j's value one season earlier (clamped), and 1 where that pair counts
    for d: both inside the context and j within the last D_WINDOW[f] positions (d measures RECENT change)."""
    pos = np.arange(CONTEXT)
    idx = np.stack([np.clip(pos - SEASON[f], 0, None) for f in FREQUENCIES]).astype(np.int64)
    ok = np.stack([(pos >= SEASON[f]) & (pos >= CONTEXT - D_WINDOW[f]) for f in FREQUENCIES]).astype(np.float32)
    return idx, ok


@dataclass(frozen=True)
class ModelConfig:
    hidden: int = 256
    blocks: int = 2
    freq_dim: int = 8
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-4
    max_steps: int = 6000
    truncate_prob: float = 0.2  # share of training windows whose context is cut short (teaches the padding mask)
    target_clip: float = 100.0  # scaled targets beyond this are clipped (a 100-MAD jump is not learnable signal)
    weight_floor: float = 0.05  # loss weight = 1 / max(seasonal-naive MAE of the context, floor)
    loss_cap: float = 20.0  # per-window weighted loss cap: a window whose target breaks away from a near-constant
    #                         context (a shop opening, a strike ending) would otherwise dominate whole batches
    freq_weights: tuple = ()  # sampling weight per frequency (default: equal)
    dropout: float = 0.1
    mixup_prob: float = 0.5  # share of windows that are a convex mix of two same-frequency windows (TSMixup)
    end_bias: float = 0.5  # share of windows cut among the last END_HORIZONS horizons of a series' training part
    mlp_on: float = 1.0  # 0 leaves only the linear skip (ablation)
    log_loss: bool = True  # mean log(eps + window loss) instead of the capped mean (see pinball)
    log_eps: float = 0.02


# -- model ------------------------------------------------------------------------------------------------------------
def make_model(cfg: ModelConfig):
    import torch
    from torch import nn

    q = len(QUANTILES)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, d)
            self.fc2 = nn.Linear(d, d)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, z):
            return z + self.drop(self.fc2(torch.relu(self.fc1(self.norm(z)))))

    class GlobalForecaster(nn.Module):
        def __init__(self):
            super().__init__()
            self.freq_embed = nn.Embedding(len(FREQUENCIES), cfg.freq_dim)
            self.inp = nn.Linear(2 * CONTEXT + cfg.freq_dim + N_FEATURES, cfg.hidden)
            # per-frequency linear lookback-to-horizon skip (TiDE's linear residual) on the last SKIP_POINTS of r:
            # one matmul for all frequencies, then the row block of the sample's frequency is gathered
            self.linear = nn.Linear(SKIP_POINTS, len(FREQUENCIES) * H_MAX)
            nn.init.zeros_(self.linear.weight)
            nn.init.zeros_(self.linear.bias)
            # per-frequency FiLM of the hidden state and affine of the head: frequencies share the MLP without
            # having to share its output semantics (step 1 is a minute at "min" and a year at "YS")
            self.film = nn.Embedding(len(FREQUENCIES), 2 * cfg.hidden)
            nn.init.zeros_(self.film.weight)
            self.out_affine = nn.Embedding(len(FREQUENCIES), 2 * H_MAX * q)
            nn.init.zeros_(self.out_affine.weight)
            self.blocks = nn.ModuleList([Block(cfg.hidden) for _ in range(cfg.blocks)])
            self.norm = nn.LayerNorm(cfg.hidden)
            self.head = nn.Linear(cfg.hidden, H_MAX * q)
            nn.init.zeros_(self.head.weight)
            # zero head: the model starts as seasonal naive, quantile steps of d * softplus(0) = 0.69 d
            nn.init.zeros_(self.head.bias)
            self.register_buffer("season_idx", torch.as_tensor(seasonal_index_table()), persistent=False)
            self.register_buffer("season2_idx", torch.as_tensor(seasonal_index_table(SEASON2)), persistent=False)
            self.register_buffer("spread_scale", torch.ones(len(FREQUENCIES), 2))
            self.gate2 = nn.Embedding(len(FREQUENCIES), H_MAX)  # move toward the secondary seasonal naive
            nn.init.zeros_(self.gate2.weight)
            self.mlp_on = float(cfg.mlp_on)
            lag_idx, lag_ok = lag_tables()
            self.register_buffer("lag_idx", torch.as_tensor(lag_idx), persistent=False)
            self.register_buffer("lag_ok", torch.as_tensor(lag_ok), persistent=False)
            pos = torch.arange(CONTEXT)
            self.register_buffer("lag1_idx", (pos - 1).clamp(min=0).view(1, -1), persistent=False)
            self.register_buffer("lag1_ok", (pos >= 1).float().view(1, -1), persistent=False)

        def naive_mae(self, x, mask, freq):
            """Seasonal-naive MAE inside the context (lag m; lag 1 when no pair m apart is observed), floored."""
            idx = self.lag_idx[freq]
            ok = self.lag_ok[freq] * mask * torch.gather(mask, 1, idx)
            n_m = ok.sum(1)
            d_m = (torch.abs(x - torch.gather(x, 1, idx)) * ok).sum(1) / n_m.clamp(min=1.0)
            ok1 = self.lag1_ok * mask * torch.gather(mask, 1, self.lag1_idx.expand_as(mask))
            d_1 = (torch.abs(x - torch.gather(x, 1, self.lag1_idx.expand_as(x))) * ok1).sum(1) / ok1.sum(1).clamp(
                min=1.0)
            return torch.where(n_m > 0, d_m, d_1).clamp(min=D_FLOOR)

        def forward(self, context, mask, freq, features):
            x = context * mask
            idx = self.season_idx[freq]  # [B, H]
            naive = torch.gather(x, 1, idx)
            d = self.naive_mae(x, mask, freq).unsqueeze(1)  # [B, 1]
            # the context again, relative to its last value in units of d: local changes (trend, the last season)
            # become O(1) inputs even for smooth series whose changes are tiny against their spread
            r = ((x - x[:, -1:]) / d).clamp(-R_CLIP, R_CLIP) * mask
            z = torch.cat([x, r * (1.0 / R_SCALE), self.freq_embed(freq), features], dim=1)
            z_dim = self.inp.out_features
            film = self.film(freq)
            z = torch.relu(self.inp(z)) * (1.0 + film[:, : z_dim]) + film[:, z_dim:]
            for blk in self.blocks:
                z = blk(z)
            # everything below is in units of d (MASE units) until multiplied by d
            aff = self.out_affine(freq).view(-1, 2, H_MAX, q)
            out = self.head(self.norm(z)).view(-1, H_MAX, q) * self.mlp_on * (1.0 + aff[:, 0]) + aff[:, 1]
            skip = self.linear(r[:, CONTEXT - SKIP_POINTS:]).view(-1, len(FREQUENCIES), H_MAX)
            skip = torch.gather(skip, 1, freq.view(-1, 1, 1).expand(-1, 1, H_MAX)).squeeze(1)
            naive2 = torch.gather(x, 1, self.season2_idx[freq])
            median = naive + self.gate2(freq) * (naive2 - naive) + d * (out[:, :, MEDIAN_INDEX] + skip)
            spread = self.spread_scale[freq]  # [B, 2]: calibrated after training (calibrate_spread), else 1
            below = (d * spread[:, :1]).unsqueeze(2) * torch.nn.functional.softplus(out[:, :, :MEDIAN_INDEX])
            above = (d * spread[:, 1:]).unsqueeze(2) * torch.nn.functional.softplus(out[:, :, MEDIAN_INDEX + 1:])
            lo = median.unsqueeze(2) - torch.flip(torch.cumsum(torch.flip(below, [2]), 2), [2])
            hi = median.unsqueeze(2) + torch.cumsum(above, 2)
            return torch.cat([lo, median.unsqueeze(2), hi], dim=2)

    return GlobalForecaster()


# -- training data ----------------------------------------------------------------------------------------------------
class WindowSampler:
    """Random training windows (context, targets, features) from series, vectorised over a batch.

    Each series contributes its history WITHOUT its last window (that is the validation target). A window's cut
    point t (index of the first target) is uniform over the positions with at least MIN_HISTORY points before it;
    targets past the series' end or past MAX_HORIZON[f] are masked out of the loss.
    """

    def __init__(self, series: list[Series], cfg: ModelConfig, seed: int):
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self.by_freq = {}
        for f in FREQUENCIES:
            ss = [s for s in series if s.frequency == f and len(s) - MAX_HORIZON[f] > MIN_HISTORY + 1]
            if not ss:
                continue
            vals = [s.values[: len(s) - MAX_HORIZON[f]] for s in ss]
            lengths = np.array([len(v) for v in vals])
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            starts = np.array([s.start for s in ss], dtype="datetime64[s]")
            self.by_freq[f] = (np.concatenate(vals), offsets, lengths, starts)
        self.freqs = list(self.by_freq)
        w = np.array([dict(cfg.freq_weights).get(f, 1.0) for f in self.freqs], dtype=np.float64)
        self.freq_p = w / w.sum()

    def batch(self, n: int):
        counts = self.rng.multinomial(n, self.freq_p)
        parts = [self._freq_batch(f, k) for f, k in zip(self.freqs, counts) if k]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))

    def _freq_batch(self, f: str, n: int):
        raw, mask, tgt, tmask, next_ts = self._raw_windows(f, n)
        if self.cfg.mixup_prob > 0:
            # TSMixup (Chronos): mix each chosen window with a second one of the same frequency, both first brought
            # to unit scale by their own context statistics, with a random convex weight; the mask is the overlap.
            mix = self.rng.random(n) < self.cfg.mixup_prob
            k = int(mix.sum())
            if k:
                raw2, mask2, tgt2, tmask2, _ = self._raw_windows(f, k)
                lam = self.rng.uniform(0.5, 1.0, k)[:, None]
                l1, s1 = scaling_stats(raw[mix], mask[mix])
                l2, s2 = scaling_stats(raw2, mask2)
                a = lam / s1[:, None]
                b = (1 - lam) / s2[:, None]
                raw[mix] = a * (raw[mix] - l1[:, None]) + b * (raw2 - l2[:, None])
                tgt[mix] = a * (tgt[mix] - l1[:, None]) + b * (tgt2 - l2[:, None])
                mask[mix] = mask[mix] * mask2
                tmask[mix] = tmask[mix] & tmask2
        cmask = mask > 0
        loc, scale = scaling_stats(raw, mask)
        ctx = scale_context(raw, mask, loc, scale)
        y = np.clip(scale_targets(tgt, loc, scale), -self.cfg.target_clip, self.cfg.target_clip) * tmask
        feats = np.concatenate([calendar_features(next_ts, [f] * n), series_features(mask, loc, scale)], axis=1)
        weight = 1.0 / np.maximum(_naive_mae(ctx, cmask, f), self.cfg.weight_floor)
        # a constant context (scale at its floor) says nothing about the scale of what follows: no loss
        weight = np.where(scale > np.maximum(1e-9 * np.abs(loc), 1e-12), weight, 0.0)
        freq = np.full(n, FREQ_INDEX[f], dtype=np.int64)
        return (ctx, mask.astype(np.float32), freq, feats, y.astype(np.float32), tmask.astype(np.float32),
                weight.astype(np.float32))

    def _raw_windows(self, f: str, n: int):
        flat, offsets, lengths, starts = self.by_freq[f]
        h_f = MAX_HORIZON[f]
        i = self.rng.integers(0, len(lengths), n)
        L = lengths[i]
        lo = np.full(n, MIN_HISTORY)
        hi_full = L - h_f  # last cut with a full target
        hi = np.where(hi_full >= lo, hi_full, L - 1)
        # half the cuts among the last END_HORIZONS horizons of the training part (N-BEATS' history limit): the
        # forecast that matters is the one after the END of a series, with its full history
        recent = self.rng.random(n) < self.cfg.end_bias
        lo = np.where(recent, np.maximum(lo, hi - END_HORIZONS * h_f), lo)
        t = lo + np.floor(self.rng.random(n) * (hi - lo + 1)).astype(np.int64)
        # context: positions t-C .. t-1 (relative to the series), optionally truncated
        first = np.maximum(t - CONTEXT_BY_FREQ[f], 0)
        trunc = self.rng.random(n) < self.cfg.truncate_prob
        keep = MIN_HISTORY + np.floor(self.rng.random(n) * (t - first - MIN_HISTORY + 1)).astype(np.int64)
        first = np.where(trunc, t - keep, first)
        pos = t[:, None] - CONTEXT + np.arange(CONTEXT)[None, :]
        cmask = pos >= first[:, None]
        raw = np.where(cmask, flat[offsets[i][:, None] + np.clip(pos, 0, None)], 0.0)
        tpos = t[:, None] + np.arange(H_MAX)[None, :]
        tmask = (tpos < L[:, None]) & (np.arange(H_MAX)[None, :] < h_f)
        tgt = np.where(tmask, flat[offsets[i][:, None] + np.minimum(tpos, L[:, None] - 1)], 0.0)
        return raw, cmask.astype(np.float64), tgt, tmask, _advance(starts[i], f, t)


def _advance(starts: np.ndarray, frequency: str, steps: np.ndarray) -> np.ndarray:
    """Vectorised start + steps periods (datetime64[s])."""
    months = {"YS": 12, "QS": 3, "MS": 1}.get(frequency)
    if months:
        m = starts.astype("datetime64[M]").astype(np.int64) + steps * months
        return m.astype("datetime64[M]").astype("datetime64[s]")
    sec = {"W": 604800, "D": 86400, "h": 3600, "30min": 1800, "15min": 900, "min": 60}[frequency]
    return starts + (steps * sec).astype("timedelta64[s]")


def _naive_mae(ctx: np.ndarray, cmask: np.ndarray, frequency: str) -> np.ndarray:
    """numpy twin of the graph's naive_mae (before its floor): lag-m MAE over the D_WINDOW pairs, else lag 1."""
    idx, ok = lag_tables()
    i = FREQ_INDEX[frequency]
    m = cmask.astype(np.float64)
    okm = ok[i][None, :] * m * m[:, idx[i]]
    n_m = okm.sum(axis=1)
    d_m = (np.abs(ctx - ctx[:, idx[i]]) * okm).sum(axis=1) / np.maximum(n_m, 1.0)
    ok1 = m[:, 1:] * m[:, :-1]
    d_1 = (np.abs(ctx[:, 1:] - ctx[:, :-1]) * ok1).sum(axis=1) / np.maximum(ok1.sum(axis=1), 1.0)
    return np.where(n_m > 0, d_m, d_1)


def pinball(pred, y, tmask, weight, cap: float = float("inf"), log_eps: float | None = None):
    """Per window: weight * mean pinball over quantiles and valid steps (d-units). Reduced over windows as the mean
    of min(loss, cap), or, with log_eps, as the mean of log(log_eps + loss): the log of a geometric mean, which is
    what the benchmark scores (geometric-mean MASE ratio), so a series that can be forecast precisely (a smooth
    trend) counts as much as a hard one, instead of hard windows dominating the sum (torch)."""
    import torch

    q = torch.tensor(QUANTILES, dtype=pred.dtype).view(1, 1, -1)
    diff = y.unsqueeze(2) - pred
    loss = torch.maximum(q * diff, (q - 1.0) * diff).mean(dim=2) * tmask
    per_window = loss.sum(dim=1) / tmask.sum(dim=1).clamp(min=1.0) * weight
    valid = (weight > 0).to(pred.dtype)
    if log_eps is not None:
        return (torch.log(log_eps + per_window) * valid).sum() / valid.sum().clamp(min=1)
    return per_window.clamp(max=cap).sum() / valid.sum().clamp(min=1)


# -- training + export ------------------------------------------------------------------------------------------------
def train(train_series: list[Series], cfg: ModelConfig, seconds_budget: float, seed: int):
    """Train a fresh model within `seconds_budget` (or cfg.max_steps); returns (model, history dict)."""
    import torch

    torch.manual_seed(seed)
    sampler = WindowSampler(train_series, cfg, seed)
    model = make_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    t0 = time.perf_counter()
    losses, step, warmup = [], 0, 100
    model.train()
    while step < cfg.max_steps:
        elapsed = time.perf_counter() - t0
        progress = max(step / cfg.max_steps, elapsed / seconds_budget)
        if progress >= 1.0:
            break
        lr = cfg.lr * min(1.0, (step + 1) / warmup) * 0.5 * (1.0 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g["lr"] = lr
        ctx, mask, freq, feats, y, tmask, w = (torch.from_numpy(a) for a in sampler.batch(cfg.batch_size))
        loss = pinball(model(ctx, mask, freq, feats), y, tmask, w, cfg.loss_cap,
                       cfg.log_eps if cfg.log_loss else None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % 500 == 0:
            log.info("step %d  loss %.4f  lr %.2e  %.0fs", step, float(np.mean(losses[-500:])), lr,
                     time.perf_counter() - t0)
    model.eval()
    seconds = time.perf_counter() - t0
    return model, {"steps": step, "seconds": round(seconds, 2), "windows_seen": step * cfg.batch_size,
                   "loss_first_100": float(np.mean(losses[:100])) if losses else None,
                   "loss_last_100": float(np.mean(losses[-100:])) if losses else None}


SPREAD_GRID = np.geomspace(0.5, 5.0, 47)


def calibrate_spread(model, series: list[Series]) -> dict[str, list[float]]:
    """Scale each frequency's lower and upper quantile offsets (one factor per side) to minimise the pinball loss
    on the LAST windows of the training series, which training never saw (their validation split). The log loss
    favours sharp forecasts on easy windows, which leaves the raw intervals too narrow on new data. One scalar per
    side keeps the quantiles ordered. Sets model.spread_scale in place; returns {frequency: [lower, upper]}."""
    import torch

    from triserve.families.forecast.features import prepare_batch

    out = {}
    model.spread_scale.fill_(1.0)
    for f in FREQUENCIES:
        ss = [s for s in series if s.frequency == f]
        if not ss:
            continue
        hist, tgt = zip(*(last_window(s) for s in ss))
        b = prepare_batch(list(hist), [f] * len(ss), [s.next_timestamp(len(h)) for s, h in zip(ss, hist)])
        q = torch_forward(model, b.feeds)[:, : MAX_HORIZON[f]].astype(np.float64)
        y = (np.stack(tgt) - b.loc[:, None]) / b.scale[:, None]
        med = q[:, :, MEDIAN_INDEX:MEDIAN_INDEX + 1]
        off = q - med
        best = []
        for side in (range(MEDIAN_INDEX), range(MEDIAN_INDEX + 1, len(QUANTILES))):
            js = list(side)
            levels = np.array([QUANTILES[j] for j in js])
            losses = []
            for c in SPREAD_GRID:
                diff = y[:, :, None] - (med + c * off[:, :, js])
                losses.append(np.nanmean(np.maximum(levels * diff, (levels - 1) * diff)))
            best.append(float(SPREAD_GRID[int(np.argmin(losses))]))
        model.spread_scale[FREQ_INDEX[f]] = torch.tensor(best)
        out[f] = best
    return out


def export_onnx(model, path: Path) -> Path:
    import onnx
    import torch

    dummy = (torch.zeros(2, CONTEXT), torch.ones(2, CONTEXT), torch.zeros(2, dtype=torch.int64),
             torch.zeros(2, N_FEATURES))
    axes = {n: {0: "batch"} for n in (*INPUT_NAMES, OUTPUT_NAME)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, dummy, str(path), dynamo=False, opset_version=OPSET, input_names=list(INPUT_NAMES),
                          output_names=[OUTPUT_NAME], dynamic_axes=axes)
    m = onnx.load(str(path))
    # the exporter leaves the output's static dims symbolic: state the contract [batch, H_MAX, Q]
    dims = m.graph.output[0].type.tensor_type.shape.dim
    for dim, value in zip(dims[1:], (H_MAX, len(QUANTILES))):
        dim.Clear()
        dim.dim_value = value
    m.doc_string = (f"triserve global forecaster: context/mask float32 [batch, {CONTEXT:d}] (scaled), freq int64 "
                    f"[batch] (index into {','.join(FREQUENCIES)}), features float32 [batch, {N_FEATURES:d}] -> "
                    f"quantiles float32 [batch, {H_MAX:d}, {len(QUANTILES):d}] (scaled) "
                    f"for quantiles {','.join(map(str, QUANTILES))}")
    for k, v in contract_metadata().items():
        m.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))
    return path


def contract_metadata() -> dict[str, str]:
    """What the graph expects, stored in the ONNX metadata (and the manifest) so a caller can check it."""
    return {"triserve.forecast.context": str(CONTEXT), "triserve.forecast.h_max": str(H_MAX),
            "triserve.forecast.quantiles": json.dumps(list(QUANTILES)),
            "triserve.forecast.frequencies": json.dumps(list(FREQUENCIES)),
            "triserve.forecast.max_horizon": json.dumps(MAX_HORIZON),
            "triserve.forecast.season": json.dumps(SEASON),
            "triserve.forecast.scaling": "loc=mean(observed context), scale=mean |x-loc| (floored); "
                                         "families/forecast/features.py"}


def torch_forward(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(*(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in INPUT_NAMES)).numpy()


def parity_cases(model, sampler: WindowSampler, seed: int, batches=(1, 7, 64)) -> list:
    """(case, feeds, torch reference) on real training windows and on random inputs, at several batch sizes."""
    rng = np.random.default_rng(seed)
    cases = []
    for b in batches:
        ctx, mask, freq, feats, *_ = sampler.batch(b)
        real = {"context": ctx, "mask": mask, "freq": freq, "features": feats}
        # random inputs shaped like scaled contexts: about unit spread, left-padded to random lengths
        n_obs = rng.integers(MIN_HISTORY, CONTEXT + 1, b)
        rmask = (np.arange(CONTEXT)[None, :] >= CONTEXT - n_obs[:, None]).astype(np.float32)
        rand = {"context": (rng.standard_normal((b, CONTEXT)) * rmask).astype(np.float32), "mask": rmask,
                "freq": rng.integers(0, len(FREQUENCIES), b).astype(np.int64),
                "features": rng.uniform(-1, 1, (b, N_FEATURES)).astype(np.float32)}
        for kind, feeds in (("real", real), ("random", rand)):
            cases.append((f"batch{b}/{kind}", feeds, torch_forward(model, feeds)))
    return cases


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def train_and_export(out_dir, corpus, seconds_budget: float = 170.0, seed: int = 20261203,
                     cfg: ModelConfig | None = None, parity_tolerance: float = 1e-4) -> dict:
    """Train on the corpus' training series, export `out_dir/model.onnx`, gate ONNX vs torch, write info.json.

    corpus: a CorpusSplit (its .train is used) or a list of training series. Returns the info dict (also written).
    """
    import torch

    from scripts.common import ort_session, parity_gate
    from scripts.forecast.corpus import corpus_fingerprint

    cfg = cfg or ModelConfig()
    train_series = list(getattr(corpus, "train", corpus))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, history = train(train_series, cfg, seconds_budget, seed)
        with torch.no_grad():
            spread = calibrate_spread(model, train_series)
        path = export_onnx(model, out_dir / "model.onnx")
        session = ort_session(path, threads=1)
        checks = parity_gate(parity_cases(model, WindowSampler(train_series, cfg, seed + 1), seed),
                             session, tolerance=parity_tolerance, output_name=OUTPUT_NAME)
        validation = validate(session, train_series)
    finally:
        torch.set_num_threads(threads)
    info = {"model_file": "model.onnx", "sha256": _sha256(path), "bytes": path.stat().st_size, "opset": OPSET,
            "config": asdict(cfg), "seed": seed, "seconds_budget": seconds_budget, "training": history,
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "corpus_fingerprint": corpus_fingerprint(train_series), "train_series": len(train_series),
            "contract": contract_metadata(), "parity": [c.model_dump() if hasattr(c, "model_dump") else vars(c)
                                                        for c in checks],
            "validation_last_window": validation, "spread_scale": spread, "torch": torch.__version__}
    (out_dir / "info.json").write_text(json.dumps(info, indent=2, default=str))
    return info


def predict(session, histories, frequencies, next_timestamps, horizons=None, batch_size: int = 4096):
    """Histories -> quantile forecasts [n, H_MAX or horizon, Q] in original units via an ORT session."""
    from triserve.families.forecast.features import prepare_batch, unscale

    outs = []
    for i in range(0, len(histories), batch_size):
        b = prepare_batch(histories[i: i + batch_size], frequencies[i: i + batch_size],
                          next_timestamps[i: i + batch_size])
        outs.append(unscale(session.run([OUTPUT_NAME], b.feeds)[0], b.loc, b.scale))
    q = np.concatenate(outs)
    if horizons is None:
        return q
    return [q[i, : int(h)] for i, h in enumerate(horizons)]


def validate(session, series: list[Series]) -> dict:
    """Geometric-mean MASE ratio vs seasonal naive on the last windows of (training) series, per frequency."""
    from scripts.forecast.metrics import mase, seasonal_naive_forecast

    out = {}
    for f in FREQUENCIES:
        ss = [s for s in series if s.frequency == f]
        if not ss:
            continue
        hist, tgt = zip(*(last_window(s) for s in ss))
        q = predict(session, list(hist), [f] * len(ss), [s.next_timestamp(len(h)) for s, h in zip(ss, hist)],
                    [MAX_HORIZON[f]] * len(ss))
        ratios = []
        for h, y, qq in zip(hist, tgt, q):
            sn = seasonal_naive_forecast(h, len(y), SEASON[f])
            a, b = mase(y, qq[:, MEDIAN_INDEX], h, SEASON[f]), mase(y, sn, h, SEASON[f])
            if np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0:
                ratios.append(a / b)
        out[f] = {"series": len(ss), "gmean_mase_ratio_vs_seasonal_naive": float(np.exp(np.mean(np.log(ratios))))
                  if ratios else None}
    return out
