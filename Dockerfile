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
# primacy and the Mamba plugin (its pure-PyTorch scan; the fused mamba_ssm kernel needs a -devel base image
# to compile: add ./plugins/primacy-mamba[cuda] there)
RUN pip install --no-cache-dir . ./plugins/primacy-mamba

ENTRYPOINT ["primacy"]
CMD ["--help"]
