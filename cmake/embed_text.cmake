# cmake -DINPUT=<file> -DOUTPUT=<header> -DNAME=<identifier> -P embed_text.cmake
# Writes a header that holds INPUT's text verbatim as `inline constexpr char NAME[]`, a raw
# string literal (the text must not contain the delimiter `)HDPPAGE"`).
file(READ "${INPUT}" text)
string(FIND "${text}" ")HDPPAGE\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw string delimiter )HDPPAGE\"")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed_text.cmake; do not edit.\n#pragma once\n\ninline constexpr char ${NAME}[] = R\"HDPPAGE(${text})HDPPAGE\";\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
