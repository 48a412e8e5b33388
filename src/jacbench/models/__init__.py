"""Built-in models. Each factory returns an ``nn.Module`` that may also define
``input_shape``, ``accepts_batch`` (forward works on a leading batch dimension),
``sample_input(generator)`` and ``analytic_jacobian(x)``."""
