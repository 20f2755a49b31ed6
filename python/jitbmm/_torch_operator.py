"""How jitbmm.torch runs the operators of its chains and their distributions: through the registered custom operator
(torch.library), which torch.compile and torch.export trace as one node and through which tensor subclasses dispatch;
or, for plain tensors in eager mode, by calling the same implementations directly, as one autograd node, or as none
where nothing is differentiated. The direct call skips the dispatcher's work on each call (the custom operator's
autograd wrapper, its checks that no output aliases an input), which on the CPU takes longer than the GPU spends on
the kernels of a small chain."""

import torch

from ._torch_support import PLAIN_TENSORS, refuse_tangents, through_dispatcher


class Operator:
    """An operator in its two forms.

    op: the registered operator, whose function is `forward`. Where it has gradients: setup_context(ctx, args,
    outputs) saves what they read; gradients(ctx, grads, needs, backward) returns one entry per argument (None where
    there is none) from grads, the outputs' gradients (None for an output whose gradient is zero, on the eager path),
    and needs, whether each argument takes one, calling `backward`: backward_op, the registered operator of the
    backward, or on the eager path its function `backward` (None where the gradients are torch operations).
    non_differentiable: the indices of the outputs without a gradient (indices, saved state)."""

    def __init__(self, op, forward, setup_context=None, gradients=None, backward_op=None, backward=None,
                 non_differentiable=()):
        self.op, self.forward, self.setup_context, self.gradients = op, forward, setup_context, gradients
        self.backward, self.non_differentiable = backward, non_differentiable
        if gradients is not None:
            op.register_autograd(lambda ctx, *grads: gradients(ctx, grads, ctx.needs_input_grad, backward_op),
                                 setup_context=setup_context)

    def __call__(self, *args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if self.gradients is not None:
            refuse_tangents(*tensors)
        if through_dispatcher() or any(type(t) not in PLAIN_TENSORS for t in tensors):
            return self.op(*args)
        if self.gradients is not None and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return _Eager.apply(self, *args)
        return self.forward(*args)


class _Eager(torch.autograd.Function):
    """An operator's eager path where something is differentiated: its implementations as one autograd node."""

    @staticmethod
    def forward(ctx, operator, *args):
        outputs = operator.forward(*args)
        ctx.mark_non_differentiable(*(outputs[i] for i in operator.non_differentiable))
        ctx.set_materialize_grads(False)  # else each backward would first fill zeros of every output's size
        ctx.operator = operator
        operator.setup_context(ctx, args, outputs)
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        if all(g is None for g in grads):  # only outputs without a gradient reached the loss
            return (None,) * len(ctx.needs_input_grad)
        operator = ctx.operator
        return (None, *operator.gradients(ctx, grads, ctx.needs_input_grad[1:], operator.backward))
