"""spec_torch.py: a trainc spec's layers as a torch.nn.Module whose state_dict has
trainc's names (docs/spec.md, Parameter names), so weights move both ways unchanged
and the model is the spec's architecture by construction.

    import spec_torch
    model = spec_torch.build(spec["model"]["layers"], spec["model"]["inputs"]["x"]["shape"])

Handles the ops of the Fashion-MNIST CNN and ResNet specs: conv2d (bias, stride,
padding, groups), batchnorm (eps, momentum, affine; BatchNorm2d over [C, H, W],
BatchNorm1d over [C] and [C, L]), layernorm (eps), relu, maxpool2d, avgpool2d, flatten, linear, and a
named residual (its body plus the input or, with a shortcut, plus the shortcut's output).
Anything else raises ValueError. Layers are made in the spec's order (a residual's body
before its shortcut), so torch.manual_seed(s) before build() draws the same initial
weights as a hand-written module that makes them in that order.
"""
import torch
import torch.nn as nn


class Layers(nn.Module):
    """Layers applied in order, each a child under its trainc name (its `name`, else
    its index in the list)."""

    def __init__(self, layers, shape):
        super().__init__()
        self.order = []
        for i, spec in enumerate(layers):
            mod, shape = make(spec, shape)
            key = spec.get("name", str(i))
            self.add_module(key, mod)
            self.order.append(key)
        self.out_shape = shape

    def forward(self, x):
        for key in self.order:
            x = self._modules[key](x)
        return x


class Residual(Layers):
    """body(x) + x, or body(x) + shortcut(x): the body's layers are children 0, 1, ...
    and the shortcut's are shortcut.0, shortcut.1, ..."""

    def __init__(self, spec, shape):
        super().__init__(spec["body"], shape)
        self.shortcut = Layers(spec["shortcut"], shape) if spec.get("shortcut") else None
        want = self.shortcut.out_shape if self.shortcut is not None else shape
        if list(self.out_shape) != list(want):
            raise ValueError(f"residual {spec.get('name')}: body gives {self.out_shape}, the sum needs {want}")

    def forward(self, x):
        y = super().forward(x)
        return y + (self.shortcut(x) if self.shortcut is not None else x)


def make(spec, shape):
    """(module, output shape) of one layer on a per-sample input of `shape`."""
    op = spec["op"]
    shape = list(shape)
    if op == "conv2d":
        k, s, p, g = spec["kernel"], spec.get("stride", 1), spec.get("padding", 0), spec.get("groups", 1)
        mod = nn.Conv2d(shape[0], spec["out"], k, s, p, groups=g, bias=spec.get("bias", True))
        return mod, [spec["out"], (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
    if op == "batchnorm":
        cls = nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
        return cls(shape[0], eps=spec.get("eps", 1e-5), momentum=spec.get("momentum", 0.1),
                   affine=spec.get("affine", True)), shape
    if op == "layernorm":
        return nn.LayerNorm(shape[-1], eps=spec.get("eps", 1e-5)), shape
    if op == "relu":
        return nn.ReLU(), shape
    if op in ("maxpool2d", "avgpool2d"):
        k = spec["kernel"]
        s, p = spec.get("stride", k), spec.get("padding", 0)
        cls = nn.MaxPool2d if op == "maxpool2d" else nn.AvgPool2d
        return cls(k, s, p), [shape[0], (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
    if op == "flatten":
        n = 1
        for d in shape:
            n *= d
        return nn.Flatten(), [n]
    if op == "linear":
        return nn.Linear(shape[-1], spec["out"], bias=spec.get("bias", True)), shape[:-1] + [spec["out"]]
    if op == "residual":
        if "name" not in spec:   # an unnamed container's layers would join its parent's names
            raise ValueError("spec_torch: name the residual")
        mod = Residual(spec, shape)
        return mod, mod.out_shape
    raise ValueError(f"spec_torch: op {op} is not handled")


def build(layers, in_shape):
    """The model of a spec's `layers` on per-sample inputs of `in_shape`."""
    return Layers(layers, in_shape)


def loss_fn(spec_model):
    """The spec's loss as f(logits, target): cross entropy with its label smoothing."""
    loss = spec_model["loss"]
    if loss["op"] != "cross_entropy":
        raise ValueError(f"spec_torch: loss {loss['op']} is not handled")
    ls = loss.get("label_smoothing", 0.0)
    return lambda logits, y: torch.nn.functional.cross_entropy(logits, y, label_smoothing=ls)
