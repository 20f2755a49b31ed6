# Sourced by the GPU machine's scripts (gpu-check, gpu-torch, gpu-chain, gpu-chain-peers, gpu-levels): the wheels in
# .whl/ that machine lacks and cannot download (torch-struct, the oracle of python_torch_chain; bench/chain.py's
# peers pytorch-crf, torbi and PyJuice) installed into /tmp/site, which joins PYTHONPATH. One wheel at a time, so
# that a wheel the machine cannot take (its Python or platform tag) leaves the others installed, and is named.
if compgen -G ".whl/*.whl" > /dev/null; then
  for wheel in .whl/*.whl; do
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheel" ||
      echo "local-wheels.sh: $wheel not installed"
  done
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
