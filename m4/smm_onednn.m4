# SMM_CHECK_ONEDNN
# ----------------
# oneDNN, the baseline that `scaledmm bench` times beside our CPU backend
# (linked into the tool only, never into libscaledmm).
#   --with-onednn=auto  (default) use it when found
#   --with-onednn=yes   stop configure when it is not found
#   --with-onednn=no    build the tool without it
# The bench uses the oneDNN 1.x/2.x C API (dnnl_matmul_desc_init and
# primitive output scales; Debian 12's libdnnl-dev is oneDNN 2.6). oneDNN 3
# removed that API, so a oneDNN 3 installation counts as not found.
# Looks for <oneapi/dnnl/dnnl.h> (else <dnnl.h>) and dnnl_matmul_desc_init
# in -ldnnl. Sets and substitutes ONEDNN_CFLAGS and ONEDNN_LIBS, defines
# SMM_HAVE_ONEDNN (and SMM_ONEDNN_ONEAPI_HEADER when the header is the
# oneapi/dnnl/ one), and sets the automake conditional SMM_ONEDNN.
AC_DEFUN([SMM_CHECK_ONEDNN], [
  AC_ARG_WITH([onednn],
    [AS_HELP_STRING([--with-onednn@<:@=auto|yes|no@:>@],
                    [time oneDNN's int8 matmul beside ours in `scaledmm bench'
                     (oneDNN 1.x/2.x, e.g. Debian's libdnnl-dev) @<:@default=auto@:>@])],
    [], [with_onednn=auto])
  AS_CASE([$with_onednn],
    [auto|yes|no], [],
    [AC_MSG_ERROR([--with-onednn takes auto, yes or no, not '$with_onednn'])])
  ONEDNN_CFLAGS=""
  ONEDNN_LIBS=""
  smm_have_onednn=no
  AS_IF([test "x$with_onednn" != xno], [
    smm_onednn_header=no
    AC_CHECK_HEADER([oneapi/dnnl/dnnl.h], [smm_onednn_header=oneapi], [
      AC_CHECK_HEADER([dnnl.h], [smm_onednn_header=plain])])
    smm_save_LIBS=$LIBS
    AS_IF([test "x$smm_onednn_header" != xno],
          [AC_CHECK_LIB([dnnl], [dnnl_matmul_desc_init],
                        [ONEDNN_LIBS="-ldnnl"; smm_have_onednn=yes])])
    LIBS=$smm_save_LIBS
    AS_IF([test "x$smm_have_onednn" = xyes], [
      AC_DEFINE([SMM_HAVE_ONEDNN], [1],
                [Define to 1 when `scaledmm bench' is built with the oneDNN baseline.])
      AS_IF([test "x$smm_onednn_header" = xoneapi],
            [AC_DEFINE([SMM_ONEDNN_ONEAPI_HEADER], [1],
                       [Define to 1 when the oneDNN header is <oneapi/dnnl/dnnl.h>.])])
    ], [test "x$with_onednn" = xyes], [
      AC_MSG_ERROR([--with-onednn=yes: oneDNN 1.x/2.x not found (dnnl.h and dnnl_matmul_desc_init in -ldnnl); on Debian: apt-get install libdnnl-dev])
    ])
  ])
  AC_MSG_CHECKING([whether scaledmm bench times oneDNN])
  AC_MSG_RESULT([$smm_have_onednn])
  AC_SUBST([ONEDNN_CFLAGS])
  AC_SUBST([ONEDNN_LIBS])
  AM_CONDITIONAL([SMM_ONEDNN], [test "x$smm_have_onednn" = xyes])
])
