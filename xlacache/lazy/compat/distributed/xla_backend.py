"""``torch_xla.distributed.xla_backend``: importing it registers nothing yet.

torch_xla registers the ``xla`` backend of ``torch.distributed`` here; with one process there
is nothing to communicate, and ``dist.init_process_group("xla")`` raises torch's own error for an
unknown backend.
"""
