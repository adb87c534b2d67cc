# Sourced on the GPU machine by run.sh: where the carried packages are and how vLLM runs offline.
export GPU_RUN=${GPU_RUN:-/tmp/gpurun} SITE=${SITE:-/tmp/site} CARRY=${CARRY:-/tmp/gpcarry}
export PYTHONPATH=$SITE:$PWD:$PWD/kit${PYTHONPATH:+:$PYTHONPATH}  # kit/: plumbline_kit (load generator, fakes)
export PATH=$SITE/bin:$PATH:/usr/local/cuda/bin
export VLLM_USE_FLASHINFER_SAMPLER=0   # no flashinfer JIT build on the first sampled request
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONUNBUFFERED=1
# NVLink multicast stays off (KINDS.md), also for anything started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
plumbline() { python3 -c 'from gateway.cli import app; app()' "$@"; }
