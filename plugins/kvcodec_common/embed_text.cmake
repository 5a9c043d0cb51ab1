# cmake -DIN=file -DOUT=header -DNAME=identifier -P embed_text.cmake
# Writes `inline constexpr const char NAME[] = R"…(contents)…";` so kernel sources stay .cl files.
file(READ ${IN} content)
file(WRITE ${OUT} "// Generated from ${IN} by embed_text.cmake; do not edit.\n#pragma once\ninline constexpr const char ${NAME}[] = R\"sluice_cl(${content})sluice_cl\";\n")
