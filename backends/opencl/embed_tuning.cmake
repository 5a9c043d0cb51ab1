# cmake -DOUT=file.cpp -DIN=tuning.txt -P embed_tuning.cmake
# Writes the tuning table as a raw string literal, sluice::ocl::kBuiltinTuningTable (cl_tuning.h).
file(READ "${IN}" text)
string(FIND "${text}" ")sluicetuning\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter")
endif()
set(body "// Generated from backends/opencl/tuning.txt by backends/opencl/embed_tuning.cmake. Do not edit.\n")
string(APPEND body "#include \"cl_tuning.h\"\n\nnamespace sluice::ocl {\n\n")
string(APPEND body "const char kBuiltinTuningTable[] = R\"sluicetuning(${text})sluicetuning\";\n\n}  // namespace sluice::ocl\n")
file(WRITE "${OUT}.tmp" "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
