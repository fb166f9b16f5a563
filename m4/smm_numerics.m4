# SMM_SET_NUMERICS_CFLAGS
# -----------------------
# Flags every translation unit of scaledmm is compiled with so that the
# compiler keeps IEEE binary32 semantics as written: no contraction of
# a*b+c into fma (the contract names every fma explicitly), no fast-math.
# Sets and substitutes SMM_NUMERICS_CFLAGS.
AC_DEFUN([SMM_SET_NUMERICS_CFLAGS], [
  SMM_NUMERICS_CFLAGS=""
  AX_APPEND_COMPILE_FLAGS([-ffp-contract=off -fno-fast-math -fexcess-precision=standard],
                          [SMM_NUMERICS_CFLAGS], [-Werror])
  AC_SUBST([SMM_NUMERICS_CFLAGS])
])
