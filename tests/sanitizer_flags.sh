# Sourced by the tests that compile a program against the built library
# (test_doc_examples.sh, test_user_path.sh): sets SANFLAGS to the -fsanitize
# options of a sanitizer build of $BUILD's library, "" otherwise.  Programs built
# against such a library need the same runtime, and Python cannot load it after the
# fact (those tests skip their Python parts when SANFLAGS is set).
SANFLAGS=""
for rt in $(ldd "$BUILD/lib/libcollective.so" 2>/dev/null | grep -o 'lib[atub]*san' | sort -u); do
    case $rt in
    libasan) SANFLAGS="$SANFLAGS -fsanitize=address" ;;
    libubsan) SANFLAGS="$SANFLAGS -fsanitize=undefined" ;;
    libtsan) SANFLAGS="$SANFLAGS -fsanitize=thread" ;;
    esac
done
