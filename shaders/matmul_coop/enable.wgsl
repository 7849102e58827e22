// The extensions `matmul_coop` needs: f16 tiles in workgroup memory and cooperative
// matrices (directives lead the module).
enable f16;
enable wgpu_cooperative_matrix;
