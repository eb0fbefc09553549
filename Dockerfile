# primacy on a GPU: docker build -t primacy . && docker run --gpus all -v "$PWD/runs:/app/runs" primacy fit --config configs/paper/fig3b-hippo-legs-L128.yaml
FROM pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WANDB_MODE=offline

WORKDIR /app
COPY pyproject.toml README.md ./
COPY primacy ./primacy
COPY configs ./configs
COPY plugins ./plugins
# primacy with the extras of its GPU commands (hf: analyze --hf_model, slurm: reproduce --launcher slurm) and every
# bundled plugin. This runtime base has no CUDA compiler, so Mamba runs its pure-PyTorch scan and xLSTM its PyTorch
# sLSTM cell (backend auto warns and falls back to it); their fused kernels compile on a -devel base image (there,
# add ./plugins/primacy-mamba[cuda]).
RUN pip install --no-cache-dir "./[hf,slurm]" ./plugins/primacy-mamba ./plugins/primacy-xlstm

ENTRYPOINT ["primacy"]
CMD ["--help"]
