# Sourced by the GPU machine's scripts (gpu-check, gpu-torch): the wheels in .whl/ that machine lacks and cannot
# download (torch-struct, the oracle of python_torch_chain) installed into /tmp/site, which joins PYTHONPATH.
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
