# Sourced by the GPU-machine scripts (gpu-bench.sh, gpu-peers.sh): $BIN/rwkv unpacked from
# the carried $BIN/rwkv.xz where only that came, the Vulkan loader from the carried
# .gl/*.deb when the machine has none, the NVIDIA ICD when the loader finds no discrete GPU
# by itself, a private XDG_RUNTIME_DIR.
if [ ! -x "$BIN/rwkv" ] && [ -f "$BIN/rwkv.xz" ]; then
  xz -dkf "$BIN/rwkv.xz" && chmod +x "$BIN/rwkv"
fi
if ! ldconfig -p | grep -q libvulkan; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if ! "$BIN/rwkv" adapters 2>/dev/null | grep -q DiscreteGpu; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
"$BIN/rwkv" adapters
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
export XDG_RUNTIME_DIR=$(mktemp -d)
chmod 700 "$XDG_RUNTIME_DIR"
export RWKV_CACHE=${RWKV_CACHE:-$OUT/cache}
