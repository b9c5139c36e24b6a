# An independent float64 Kimi-Linear forward in numpy, written from spec/model-families.md §1-§3 (not from
# transformers): used to pick a seed with safe router margins and to cross-check transformers' result.
import numpy as np


def rms_norm(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):  # torch's default: beta 1, threshold 20
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


class KimiLinearNp:
    def __init__(self, cfg, weights):
        """weights: dict release name -> float64 array."""
        self.c, self.w = cfg, weights
        lac = cfg["linear_attn_config"]
        self.nh, self.dh, self.cw = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"]
        self.kda_layers = set(lac["kda_layers"])
        self.eps = cfg["rms_norm_eps"]

    def kda(self, x, a):
        w, T, H, D, W = self.w, x.shape[0], self.nh, self.dh, self.cw

        def conv_silu(y, k):  # causal depthwise conv, k [P, 1, W]; tap W-1 is the current token
            yp = np.concatenate([np.zeros((W - 1, y.shape[1])), y], 0)
            return silu(sum(yp[i:i + T] * k[:, 0, i] for i in range(W)))

        q = conv_silu(x @ w[a + "q_proj.weight"].T, w[a + "q_conv1d.weight"]).reshape(T, H, D)
        k = conv_silu(x @ w[a + "k_proj.weight"].T, w[a + "k_conv1d.weight"]).reshape(T, H, D)
        v = conv_silu(x @ w[a + "v_proj.weight"].T, w[a + "v_conv1d.weight"]).reshape(T, H, D)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * D**-0.5
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        graw = (x @ w[a + "f_a_proj.weight"].T) @ w[a + "f_b_proj.weight"].T + w[a + "dt_bias"].reshape(-1)
        A = np.exp(w[a + "A_log"].reshape(-1)[:H])
        g = -A[None, :, None] * softplus(graw.reshape(T, H, D))  # log decay per key channel
        beta = sigmoid(x @ w[a + "b_proj.weight"].T)  # [T, H]
        S = np.zeros((H, D, D))  # [head, key, value]
        o = np.zeros((T, H, D))
        for t in range(T):
            S = np.exp(g[t])[:, :, None] * S
            u = v[t] - np.einsum("hkv,hk->hv", S, k[t])
            S = S + beta[t][:, None, None] * k[t][:, :, None] * u[:, None, :]
            o[t] = np.einsum("hkv,hk->hv", S, q[t])
        gate = ((x @ w[a + "g_a_proj.weight"].T) @ w[a + "g_b_proj.weight"].T).reshape(T, H, D)
        o = rms_norm(o, w[a + "o_norm.weight"], self.eps) * sigmoid(gate)
        return o.reshape(T, -1) @ w[a + "o_proj.weight"].T

    def mla(self, x, a, latent_eps):
        c, w, T = self.c, self.w, x.shape[0]
        H, nope, rope, vd, r = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                                c["v_head_dim"], c["kv_lora_rank"])
        q = (x @ w[a + "q_proj.weight"].T).reshape(T, H, nope + rope).transpose(1, 0, 2)
        ckv = x @ w[a + "kv_a_proj_with_mqa.weight"].T
        kv = rms_norm(ckv[:, :r], w[a + "kv_a_layernorm.weight"], latent_eps) @ w[a + "kv_b_proj.weight"].T
        kv = kv.reshape(T, H, nope + vd).transpose(1, 0, 2)
        key = np.concatenate([kv[..., :nope], np.broadcast_to(ckv[None, :, r:], (H, T, rope))], -1)  # no rotary
        s = q @ key.transpose(0, 2, 1) * (nope + rope) ** -0.5
        s = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return (p @ kv[..., nope:]).transpose(1, 0, 2).reshape(T, -1) @ w[a + "o_proj.weight"].T

    def swiglu(self, x, pre, gate, up, down):
        w = self.w
        return (silu(x @ w[pre + gate].T) * (x @ w[pre + up].T)) @ w[pre + down].T

    def moe(self, x, m, biased_weights, margins):
        c, w, k = self.c, self.w, self.c["num_experts_per_token"]
        s = sigmoid(x @ w[m + "gate.weight"].T)
        choice = s + w[m + "gate.e_score_correction_bias"][None]  # for selection only (n_group = 1)
        order = np.argsort(-choice, -1, kind="stable")
        idx = order[:, :k]
        srt = np.take_along_axis(choice, order, -1)
        margins.append(srt[:, k - 1] - srt[:, k])
        tw = np.take_along_axis(choice if biased_weights else s, idx, -1)
        if c["moe_renormalize"]:
            tw = tw / (tw.sum(-1, keepdims=True) + 1e-20)
        tw = tw * c["routed_scaling_factor"]
        y = np.zeros_like(x)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            pre = m + f"experts.{e}."
            y[rows] += tw[rows, slot][:, None] * self.swiglu(x[rows], pre, "w1.weight", "w3.weight", "w2.weight")
        return y + self.swiglu(x, m + "shared_experts.", "gate_proj.weight", "up_proj.weight", "down_proj.weight")

    def forward(self, ids, latent_eps=1e-6, biased_weights=False):
        """Logits [T, vocab] and the router margins [n_moe_layers, T] (k-th minus (k+1)-th biased score)."""
        c, w, margins = self.c, self.w, []
        h = w["model.embed_tokens.weight"][np.asarray(ids)]
        for layer in range(c["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            x = rms_norm(h, w[p + "input_layernorm.weight"], self.eps)
            if layer + 1 in self.kda_layers:
                h = h + self.kda(x, p + "self_attn.")
            else:
                h = h + self.mla(x, p + "self_attn.", latent_eps)
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], self.eps)
            if layer < c["first_k_dense_replace"]:
                h = h + self.swiglu(x, p + "mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight")
            else:
                h = h + self.moe(x, p + "block_sparse_moe.", biased_weights, margins)
        h = rms_norm(h, w["model.norm.weight"], self.eps)
        return h @ w["lm_head.weight"].T, np.array(margins)

    def greedy(self, prompt, n_new, **kw):
        ids = list(prompt)
        for _ in range(n_new):
            ids.append(int(np.argmax(self.forward(ids, **kw)[0][-1])))
        return ids[len(prompt):]
