# SMM_CHECK_OPENBLAS
# ------------------
# Finds OpenBLAS's CBLAS: pkg-config module `openblas` first, then a plain
# library check for cblas_dgemm in -lopenblas. Sets and substitutes
# OPENBLAS_CFLAGS and OPENBLAS_LIBS; stops configure when neither works.
AC_DEFUN([SMM_CHECK_OPENBLAS], [
  PKG_CHECK_MODULES([OPENBLAS], [openblas], [smm_have_openblas=yes], [
    smm_save_LIBS=$LIBS
    AC_CHECK_LIB([openblas], [cblas_dgemm],
                 [OPENBLAS_LIBS="-lopenblas"; OPENBLAS_CFLAGS=""; smm_have_openblas=yes],
                 [smm_have_openblas=no])
    LIBS=$smm_save_LIBS
  ])
  AS_IF([test "x$smm_have_openblas" != xyes],
        [AC_MSG_ERROR([OpenBLAS not found (pkg-config module openblas or -lopenblas); on Debian: apt-get install libopenblas-dev])])
  smm_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS $OPENBLAS_CFLAGS"
  AC_CHECK_HEADER([cblas.h], [],
                  [AC_MSG_ERROR([cblas.h not found; on Debian: apt-get install libopenblas-dev])])
  CFLAGS=$smm_save_CFLAGS
  AC_SUBST([OPENBLAS_CFLAGS])
  AC_SUBST([OPENBLAS_LIBS])
])
