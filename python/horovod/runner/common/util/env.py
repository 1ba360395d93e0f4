"""``get_env_rank_and_size()``: this process's rank and size as the launcher that started it
gives them, before Horovod is initialized (``horovod.run`` files each result under it)."""

import os

__all__ = ['get_env_rank_and_size']

# Each launcher's (rank, size) variables, in the order they are looked at: horovodrun, Open MPI's
# mpirun (and jsrun), MPICH/Hydra and Intel MPI.
_RANK_SIZE_VARIABLES = (('HOROVOD_RANK', 'HOROVOD_SIZE'),
                        ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE'),
                        ('PMI_RANK', 'PMI_SIZE'))


def get_env_rank_and_size():
    """(rank, size) from the first pair of variables that is set; (0, 1) when none is. A pair of
    which only one is set raises RuntimeError naming both."""
    for rank_var, size_var in _RANK_SIZE_VARIABLES:
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is None and size is None:
            continue
        if rank is None or size is None:
            raise RuntimeError('Could not determine process rank and size: only one of {} and {} found in '
                               'environment'.format(rank_var, size_var))
        return int(rank), int(size)
    return 0, 1
