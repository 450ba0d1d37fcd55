"""tpu: TPU chips and ICI pods.

Will model chips (MXU, VPU, VMEM, HBM), 2D/3D ICI tori with their wraparound rules and the
collectives run over them, at packet/transfer level in a nanosecond clock domain.
Status: not yet built.
"""
