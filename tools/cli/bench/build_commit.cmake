# Run at every build of `sluice` (cmake -P): writes OUT, a header defining SLUICE_BUILD_COMMIT as the
# source tree's HEAD (with -dirty when tracked files differ from it), only when that changed, so the
# commit `sluice bench` records is the one the program was built from without recompiling every build.
execute_process(COMMAND git rev-parse HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT head)
  set(head unknown)
elseif(dirty)
  set(head "${head}-dirty")
endif()
set(text "#define SLUICE_BUILD_COMMIT \"${head}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
