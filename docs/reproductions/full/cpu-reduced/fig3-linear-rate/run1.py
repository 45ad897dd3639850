"""Run one of this folder's scripts with one native thread (the machine is shared):
    python run1.py SCRIPT.py ARGS..."""
import runpy, sys
import lsa_native

lsa_native.set_num_threads(1)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
