"""Gradient hooks shared by the torch distributed optimizers."""


def register_grad_hooks(opt):
    """For each parameter of ``opt`` that requires a gradient: adds it to
    ``opt._requires_update`` and registers ``opt._make_hook(p)`` to run once its gradient has been
    accumulated (the handles go to ``opt._hook_handles``)."""
    for param_group in opt.param_groups:
        for p in param_group['params']:
            if not p.requires_grad:
                continue
            opt._requires_update.add(p)
            hook = opt._make_hook(p)
            if hasattr(p, 'register_post_accumulate_grad_hook'):  # torch >= 2.1
                opt._hook_handles.append(p.register_post_accumulate_grad_hook(hook))
            else:
                # Older torch: hook the parameter's gradient accumulator (kept alive in
                # opt._grad_accs, or the hook would go away with it).
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                opt._hook_handles.append(grad_acc.register_hook(hook))
                opt._grad_accs.append(grad_acc)
