from device_plugin.cli import main

main()
