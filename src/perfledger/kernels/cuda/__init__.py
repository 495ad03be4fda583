"""CUDA-side primitives: the GPU digest, CUDA-event timing, roofline ceilings."""
