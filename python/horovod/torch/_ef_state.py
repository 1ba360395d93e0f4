"""Error-feedback compressor state in a torch optimizer's state dict: keyed by parameter name
(the slot keys are the parameters themselves), so it survives ``torch.save`` and a new model
object with the same names."""

_STEP = '__step__'


def export(compressor, names):
    """{parameter name (or '__step__'): {slot name: tensor}} of ``compressor``'s state; the
    tensors are the live slots (as torch's own state_dict hands out its buffers)."""
    out = {}
    for key, slot_name, slot in compressor.state_items():
        name = key if isinstance(key, str) else names[key]
        out.setdefault(name, {})[slot_name] = slot
    return out


def load(compressor, state, names):
    """Copies ``state`` (from ``export``) into ``compressor``, creating slots it lacks;
    ``names`` maps parameters to names. Unknown parameter names raise ValueError."""
    by_name = {n: p for p, n in names.items()}
    by_name[_STEP] = _STEP
    unknown = sorted(set(state) - set(by_name))
    if unknown:
        raise ValueError('Compression state names parameters this optimizer does not have: '
                         '{}'.format(', '.join(unknown)))
    current = {(id(k), n): s for k, n, s in compressor.state_items()}
    for name in sorted(state, key=lambda n: (n != _STEP, n)):
        key = by_name[name]
        for slot_name, value in state[name].items():
            slot = current.get((id(key), slot_name))
            if slot is not None and slot.shape == value.shape:
                slot.copy_(value)
            else:
                compressor.adopt_slot(key, slot_name, value.detach().clone())
