"""Groups of gradients, each reduced by one grouped collective: the ``groups`` argument every
gradient wrapper takes (torch aside), checked and turned into lists of gradient positions.

``groups`` is None (every gradient in one group), a positive int k (the present gradients split
into k contiguous, nearly equal groups) or lists of variables (those groups, in that order, then
every other gradient alone). Variables are told apart by ``key(variable)``.
"""

from horovod.common.util import split_list


def check_variable_groups(groups, is_variable, key=id):
    """Raises ValueError unless ``groups`` is None, a positive int, or lists of variables
    (``is_variable(obj)``) in which no variable appears twice."""
    if groups is None:
        return
    if isinstance(groups, int):
        if groups <= 0:
            raise ValueError('groups must be a positive int or a list of lists of variables, '
                             'got {}'.format(groups))
        return
    if not isinstance(groups, (list, tuple)):
        raise ValueError('groups must be a positive int or a list of lists of variables, got '
                         '{!r}'.format(type(groups).__name__))
    seen = set()
    for group in groups:
        for var in group:
            if not is_variable(var):
                raise ValueError('groups must contain only variables, got {!r}'
                                 .format(type(var).__name__))
            if key(var) in seen:
                raise ValueError('A variable can only appear once in groups: {}'
                                 .format(getattr(var, 'name', var)))
            seen.add(key(var))


def group_indices(grads, variables, groups, key=id):
    """Lists of positions in ``grads`` (None gradients left out), one list per grouped call;
    ``variables[i]`` is the variable of ``grads[i]`` (needed only for groups of variables)."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return []
    if groups is None:
        return [present]
    if isinstance(groups, int):
        return [part for part in split_list(present, min(groups, len(present))) if part]
    if variables is None:
        raise ValueError('groups given as lists of variables need the variables the gradients '
                         'belong to (pass sources/vars).')
    position = {key(v): i for i, v in enumerate(variables)}
    result, grouped = [], set()
    for group in groups:
        members = [position[key(v)] for v in group
                   if key(v) in position and grads[position[key(v)]] is not None]
        grouped.update(members)
        if members:
            result.append(members)
    result.extend([i] for i in present if i not in grouped)
    return result
