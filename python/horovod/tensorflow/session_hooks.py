"""BroadcastGlobalVariablesHook: broadcasts every global variable from a root rank when a TF1
``MonitoredTrainingSession`` (or any session run with hooks) is created."""

import tensorflow as tf

from horovod.tensorflow.functions import broadcast_global_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Session hook that makes every rank start from ``root_rank``'s variables (after they were
    initialized or restored from a checkpoint). ``device`` places the broadcast op."""

    def __init__(self, root_rank, device=''):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        # Built once per graph (a hook may be reused by a second MonitoredSession).
        if self.bcast_op is None or self.bcast_op.graph is not tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
